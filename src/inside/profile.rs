//! Profiles of one case (`run --profile FILE`): the process is sampled
//! while the case is measured, and the stacks are written as folded stacks
//! (`FILE` with the extension `.folded`, one `frame;frame;... count` line
//! per stack, the input of every flamegraph tool) and a flamegraph SVG.
//!
//! The sampler is in-process (the `pprof` crate: a `SIGPROF` timer at
//! [`FREQUENCY_HZ`] on CPU time, stacks unwound in the handler), so it
//! works where `perf record` is not installed or not permitted, and needs
//! no PMU (these VMs have none); the SVG is drawn by `inferno`, the Rust
//! port of Brendan Gregg's flamegraph.pl. A profiled case's timings carry
//! the sampler's overhead, and its result says so.

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Samples per second of CPU time (an odd rate, so it does not beat with
/// periodic work).
pub const FREQUENCY_HZ: i32 = 997;

/// The files a profile was written to.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ProfileFiles {
    /// The flamegraph SVG.
    pub svg: String,
    /// The folded stacks.
    pub folded: String,
    /// Stacks sampled.
    pub samples: u64,
}

/// The paths for the profile of the `index`-th of `count` profiled cases:
/// `file` itself when there is one case, else `STEM.INDEX.EXT`; the folded
/// stacks beside it with the extension `.folded`.
pub fn paths_for(file: &Path, index: usize, count: usize) -> (PathBuf, PathBuf) {
    let svg = if count <= 1 {
        file.to_path_buf()
    } else {
        let stem = file.file_stem().map_or_else(|| "profile".into(), |s| s.to_string_lossy().into_owned());
        let ext = file.extension().map_or_else(|| "svg".into(), |e| e.to_string_lossy().into_owned());
        file.with_file_name(format!("{stem}.{}.{ext}", index + 1))
    };
    let folded = svg.with_extension("folded");
    (svg, folded)
}

/// Stacks as folded lines: `frames` outermost first, each line the
/// thread's name, the frames joined with `;`, a space and the count;
/// sorted, so the file is stable.
pub fn fold(stacks: impl IntoIterator<Item = (String, Vec<String>, u64)>) -> Vec<String> {
    let mut lines: Vec<String> = stacks
        .into_iter()
        .filter(|(_, _, n)| *n > 0)
        .map(|(thread, frames, n)| {
            let mut parts = vec![clean(&thread)];
            parts.extend(frames.iter().map(|f| clean(f)));
            format!("{} {n}", parts.join(";"))
        })
        .collect();
    lines.sort();
    lines
}

/// A frame name as one field of a folded line (no `;`, no newline, no
/// trailing spaces that would be taken for the count), its generic
/// arguments left out (`gemm<f32>` is `gemm`: Rust's monomorphised names
/// run to hundreds of characters and bloat the SVG) and at most
/// [`MAX_FRAME`] characters.
fn clean(s: &str) -> String {
    let t: String = s.chars().map(|c| if c == ';' || c == '\n' { ':' } else { c }).collect();
    let mut t = t.trim();
    if let Some(i) = t.find('<').filter(|&i| i > 0) {
        t = &t[..i];
    }
    let t: String = t.chars().take(MAX_FRAME).collect();
    if t.is_empty() { "[unknown]".into() } else { t }
}

/// Longest frame name kept in a folded line, in characters.
const MAX_FRAME: usize = 100;

/// Draws `folded` lines as a flamegraph SVG titled `title`.
pub fn flamegraph(folded: &[String], title: &str) -> Result<Vec<u8>, String> {
    let mut opts = inferno::flamegraph::Options::default();
    opts.title = title.to_string();
    opts.count_name = "samples".into();
    let mut svg = Vec::new();
    inferno::flamegraph::from_lines(&mut opts, folded.iter().map(String::as_str), &mut svg)
        .map_err(|e| format!("drawing the flamegraph: {e}"))?;
    Ok(svg)
}

/// Writes the folded stacks and the flamegraph of `folded` to `svg` and
/// `folded_path`.
pub fn write(folded: &[String], title: &str, svg: &Path, folded_path: &Path) -> Result<ProfileFiles, String> {
    let samples = folded.iter().filter_map(|l| l.rsplit_once(' ')?.1.parse::<u64>().ok()).sum();
    let text = folded.join("\n") + "\n";
    std::fs::write(folded_path, text).map_err(|e| format!("writing {}: {e}", folded_path.display()))?;
    let drawn = flamegraph(folded, title)?;
    std::fs::write(svg, drawn).map_err(|e| format!("writing {}: {e}", svg.display()))?;
    // Absolute, so the HTML report links them from wherever it is written.
    let abs = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf()).display().to_string();
    Ok(ProfileFiles { svg: abs(svg), folded: abs(folded_path), samples })
}

/// A running sampler; [`Sampler::finish`] stops it and returns the stacks.
pub struct Sampler {
    #[cfg(unix)]
    guard: pprof::ProfilerGuard<'static>,
}

impl Sampler {
    /// Starts sampling the whole process at [`FREQUENCY_HZ`].
    pub fn start() -> Result<Self, String> {
        #[cfg(unix)]
        {
            let guard = pprof::ProfilerGuardBuilder::default()
                .frequency(FREQUENCY_HZ)
                .blocklist(&["libc", "libgcc", "pthread", "vdso"])
                .build()
                .map_err(|e| format!("cannot start the profiler: {e}"))?;
            Ok(Self { guard })
        }
        #[cfg(not(unix))]
        {
            Err("--profile samples with SIGPROF, which this platform does not have".into())
        }
    }

    /// Stops sampling; the stacks as folded lines ([`fold`]).
    pub fn finish(self) -> Result<Vec<String>, String> {
        #[cfg(unix)]
        {
            let report = self.guard.report().build().map_err(|e| format!("reading the profile: {e}"))?;
            let stacks = report.data.iter().map(|(frames, &n)| {
                // pprof keeps frames innermost first, and a frame's inlined
                // symbols innermost first too.
                let names: Vec<String> =
                    frames.frames.iter().rev().flat_map(|f| f.iter().rev().map(|s| s.to_string())).collect();
                (frames.thread_name_or_id(), names, n.max(0) as u64)
            });
            Ok(fold(stacks))
        }
        #[cfg(not(unix))]
        {
            Err("no profiler on this platform".into())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_for_one_and_several_cases() {
        let (svg, folded) = paths_for(Path::new("out/flame.svg"), 0, 1);
        assert_eq!((svg.to_str(), folded.to_str()), (Some("out/flame.svg"), Some("out/flame.folded")));
        let (svg, folded) = paths_for(Path::new("out/flame.svg"), 1, 3);
        assert_eq!((svg.to_str(), folded.to_str()), (Some("out/flame.2.svg"), Some("out/flame.2.folded")));
    }

    #[test]
    fn folding_is_sorted_and_clean() {
        let lines = fold([
            ("main".to_string(), vec!["a<T, U>".into(), "b;c".into()], 3),
            ("main".to_string(), vec!["a".into()], 0),
            ("w 1".to_string(), vec!["".into(), "x".into()], 2),
        ]);
        assert_eq!(lines, vec!["main;a;b:c 3", "w 1;[unknown];x 2"]);
    }

    #[test]
    fn a_flamegraph_is_drawn_and_written() {
        let folded = fold([("main".to_string(), vec!["run".into(), "gemm".into()], 7)]);
        let dir = std::env::temp_dir().join(format!("tfbench-profile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (svg, f) = paths_for(&dir.join("p.svg"), 0, 1);
        let files = write(&folded, "t", &svg, &f).unwrap();
        assert_eq!(files.samples, 7);
        let text = std::fs::read_to_string(&svg).unwrap();
        assert!(text.contains("<svg") && text.contains("gemm"), "{}", &text[..200.min(text.len())]);
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "main;run;gemm 7\n");
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn the_sampler_sees_a_busy_loop() {
        let s = Sampler::start().unwrap();
        let t = std::time::Instant::now();
        let mut x = 1.0f64;
        // Few clock reads: samples that land in the vDSO's clock are
        // dropped (the sampler does not unwind there).
        while t.elapsed().as_millis() < 300 {
            for _ in 0..100_000 {
                x = std::hint::black_box(x * 1.000_000_1 + 1e-9);
            }
        }
        let lines = s.finish().unwrap();
        let samples: u64 = lines.iter().filter_map(|l| l.rsplit_once(' ')?.1.parse::<u64>().ok()).sum();
        // 300 ms of CPU at ~1 kHz; a loaded host gives less CPU, so a low bar.
        assert!(samples >= 10, "{samples} samples: {lines:?}");
    }
}
