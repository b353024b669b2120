//! Valgrind's side of instruction counting: the client requests that start
//! and stop callgrind's instrumentation around the counted call, the fixed
//! cache model, and the reading of callgrind's output file.
//!
//! # Why client requests, not `--toggle-collect`
//!
//! Callgrind's collection state (`--toggle-collect`, `CALLGRIND_TOGGLE_COLLECT`)
//! is per thread: a case whose kernels run on rayon's workers would have
//! their instructions left out. Instrumentation (`--instr-atstart=no` with
//! `CALLGRIND_START_INSTRUMENTATION` / `STOP_INSTRUMENTATION`) is global, so
//! every thread's instructions between the two requests are counted, and
//! nothing before or after (start-up, preparing the case, its self-check).
//! Instrumentation starts before the uncounted warm-up call, so that the
//! simulated caches hold what the case's previous iteration left in them
//! (as on a CPU running it in a loop); `CALLGRIND_ZERO_STATS` then drops
//! the warm-up's counts right before the counted call. The requests are Valgrind's "magic" instruction
//! sequence (a no-op on a real CPU), written here in inline assembly as
//! `valgrind.h` writes it, so no C header or crate is needed.

use serde::{Deserialize, Serialize};

/// Callgrind's request codes (`callgrind.h`: `VG_USERREQ_TOOL_BASE('C','T')`).
const CALLGRIND_BASE: usize = ((b'C' as usize) << 24) | ((b'T' as usize) << 16);
/// `CALLGRIND_ZERO_STATS`.
const ZERO_STATS: usize = CALLGRIND_BASE + 1;
/// `CALLGRIND_START_INSTRUMENTATION`.
const START_INSTRUMENTATION: usize = CALLGRIND_BASE + 4;
/// `CALLGRIND_STOP_INSTRUMENTATION`.
const STOP_INSTRUMENTATION: usize = CALLGRIND_BASE + 5;
/// `RUNNING_ON_VALGRIND` (a core request: `VG_USERREQ__RUNNING_ON_VALGRIND`).
const RUNNING_ON_VALGRIND: usize = 0x1001;

/// The cache model every count is taken with (`--I1`, `--D1`, `--LL`):
/// fixed, so that L1/LL misses and estimated cycles do not depend on the
/// caches of the machine that counted (callgrind otherwise copies the
/// host's, and takes a 2-way 512 MiB "LL" from a large L3).
pub const CACHE_MODEL: [&str; 3] = ["--I1=32768,8,64", "--D1=32768,8,64", "--LL=8388608,16,64"];

/// Sends a client request; returns `default` when not under Valgrind.
#[allow(unused_variables)]
fn request(default: usize, code: usize, args: [usize; 5]) -> usize {
    let block: [usize; 6] = [code, args[0], args[1], args[2], args[3], args[4]];
    #[cfg(target_arch = "x86_64")]
    {
        let result: usize;
        // SAFETY: the magic sequence rotates rdi by 128 bits in all (so it
        // is unchanged, declared clobbered anyway) and exchanges rbx with
        // itself: a no-op on a CPU. Under Valgrind it reads `block`
        // (alive for the call) and writes the result to rdx.
        unsafe {
            std::arch::asm!(
                "rol rdi, 3", "rol rdi, 13", "rol rdi, 61", "rol rdi, 51",
                "xchg rbx, rbx",
                inout("rdx") default => result,
                in("rax") block.as_ptr(),
                inout("rdi") 0usize => _,
                options(nostack),
            );
        }
        result
    }
    #[cfg(target_arch = "aarch64")]
    {
        let result: usize;
        // SAFETY: as above, valgrind.h's sequence for arm64: x12 rotated by
        // 128 bits in all, `orr x10, x10, x10` a no-op on a CPU.
        unsafe {
            std::arch::asm!(
                "ror x12, x12, #3", "ror x12, x12, #13", "ror x12, x12, #51", "ror x12, x12, #61",
                "orr x10, x10, x10",
                inout("x3") default => result,
                in("x4") block.as_ptr(),
                inout("x12") 0usize => _,
                options(nostack),
            );
        }
        result
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        default
    }
}

/// Whether this process runs under Valgrind (`RUNNING_ON_VALGRIND`).
pub fn on_valgrind() -> bool {
    request(0, RUNNING_ON_VALGRIND, [0; 5]) > 0
}

/// Whether this build can send client requests (the magic sequence exists
/// for this architecture).
pub const SUPPORTED: bool = cfg!(any(target_arch = "x86_64", target_arch = "aarch64"));

/// Starts callgrind's instrumentation: every thread is counted from here.
pub fn start_instrumentation() {
    request(0, START_INSTRUMENTATION, [0; 5]);
}

/// Zeroes callgrind's counts of every thread: what ran before is not
/// counted, though the simulated caches keep what it loaded.
pub fn zero_stats() {
    request(0, ZERO_STATS, [0; 5]);
}

/// Stops callgrind's instrumentation: nothing is counted from here.
pub fn stop_instrumentation() {
    request(0, STOP_INSTRUMENTATION, [0; 5]);
}

/// Callgrind's event totals of one counted run, as the output file states
/// them (`events:` names, `totals:` or `summary:` values).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Totals {
    /// `creator:`, e.g. `callgrind-3.19.0`.
    pub creator: String,
    /// The event names and their totals, in file order.
    pub events: Vec<(String, u64)>,
}

impl Totals {
    /// The total of event `name` (0 when the file does not have it).
    pub fn get(&self, name: &str) -> u64 {
        self.events.iter().find(|(n, _)| n == name).map_or(0, |(_, v)| *v)
    }
}

/// Reads a callgrind output file's totals: the last `events:` line names
/// the columns, the `totals:` line (else `summary:`) gives their sums.
/// An error says what is missing or malformed.
pub fn parse(text: &str) -> Result<Totals, String> {
    let mut creator = String::new();
    let mut names: Option<Vec<String>> = None;
    let (mut totals, mut summary) = (None, None);
    for line in text.lines() {
        if let Some(v) = line.strip_prefix("creator:") {
            creator = v.trim().to_string();
        } else if let Some(v) = line.strip_prefix("events:") {
            names = Some(v.split_whitespace().map(str::to_string).collect());
        } else if let Some(v) = line.strip_prefix("totals:") {
            totals = Some(v.to_string());
        } else if let Some(v) = line.strip_prefix("summary:") {
            summary = Some(v.to_string());
        }
    }
    let names = names.ok_or("no `events:` line: not a callgrind output file")?;
    let values = totals.or(summary).ok_or("no `totals:` or `summary:` line: the run did not finish")?;
    let values: Vec<u64> = values
        .split_whitespace()
        .map(|v| v.parse::<u64>().map_err(|_| format!("bad total {v:?}")))
        .collect::<Result<_, _>>()?;
    if values.len() > names.len() || values.is_empty() {
        return Err(format!("{} totals for {} events", values.len(), names.len()));
    }
    // Trailing zero columns may be left out (callgrind's compression).
    let events =
        names.into_iter().enumerate().map(|(i, n)| (n, values.get(i).copied().unwrap_or(0))).collect();
    Ok(Totals { creator, events })
}

/// A case's instruction counts per iteration, with what they were taken on.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Counts {
    /// The tool, e.g. `callgrind-3.19.0`.
    pub tool: String,
    /// Iterations counted (in one call, or calls of the case's fixed count).
    pub iterations: u64,
    /// Instructions executed per iteration (callgrind's `Ir`): the measure
    /// `compare` judges.
    pub instructions: f64,
    /// Data reads and writes per iteration (`Dr`, `Dw`).
    pub data_accesses: f64,
    /// L1 misses per iteration, instruction and data (`I1mr + D1mr + D1mw`).
    pub l1_misses: f64,
    /// Last-level misses per iteration (`ILmr + DLmr + DLmw`).
    pub ll_misses: f64,
    /// Estimated cycles per iteration: L1 hits + 5 x LL hits + 35 x LL
    /// misses (iai-callgrind's weights) on the fixed cache model.
    pub estimated_cycles: f64,
    /// The instruction-set level kernels dispatched to under Valgrind
    /// (`avx2` where the CPU has AVX-512: Valgrind does not emulate it).
    pub isa: String,
    /// The features kernels could use under Valgrind (`isa::usable`).
    #[serde(default)]
    pub features: Vec<String>,
    /// Worker threads of the counted run.
    pub threads: usize,
    /// The cache model ([`CACHE_MODEL`]).
    pub cache_model: String,
}

impl Counts {
    /// The per-iteration figures of `t`, counted over `iterations`.
    pub fn from_totals(
        t: &Totals,
        iterations: u64,
        isa: String,
        features: Vec<String>,
        threads: usize,
    ) -> Self {
        let n = iterations.max(1) as f64;
        let ir = t.get("Ir") as f64;
        let accesses = (t.get("Dr") + t.get("Dw")) as f64;
        let l1 = (t.get("I1mr") + t.get("D1mr") + t.get("D1mw")) as f64;
        let ll = (t.get("ILmr") + t.get("DLmr") + t.get("DLmw")) as f64;
        Self {
            tool: t.creator.clone(),
            iterations,
            instructions: ir / n,
            data_accesses: accesses / n,
            l1_misses: l1 / n,
            ll_misses: ll / n,
            estimated_cycles: estimated_cycles(ir + accesses, l1, ll) / n,
            isa,
            features,
            threads,
            cache_model: CACHE_MODEL.join(" "),
        }
    }

    /// One line for a case's notes and the table.
    pub fn brief(&self) -> String {
        format!(
            "{} instructions, {} est. cycles, {} L1 / {} LL misses per iteration ({}, {}, {} iteration(s), {} thread(s))",
            super::si(self.instructions),
            super::si(self.estimated_cycles),
            super::si(self.l1_misses),
            super::si(self.ll_misses),
            self.tool,
            self.isa,
            self.iterations,
            self.threads
        )
    }

    /// What must match for two counts to be compared: the ISA dispatched
    /// to, its features and the threads (`None` when they match).
    pub fn incomparable(&self, other: &Counts) -> Option<String> {
        if self.isa != other.isa || self.features != other.features {
            return Some(format!(
                "counted at different ISAs ({} [{}] vs {} [{}])",
                self.isa,
                self.features.join(" "),
                other.isa,
                other.features.join(" ")
            ));
        }
        if self.threads != other.threads {
            return Some(format!("counted on {} vs {} thread(s)", self.threads, other.threads));
        }
        None
    }
}

/// iai-callgrind's estimate: every access (instruction fetch or data) that
/// hits L1 costs 1, one that misses L1 and hits LL 5, one that misses LL 35.
pub fn estimated_cycles(accesses: f64, l1_misses: f64, ll_misses: f64) -> f64 {
    let l1_hits = accesses - l1_misses;
    let ll_hits = l1_misses - ll_misses;
    l1_hits + 5.0 * ll_hits + 35.0 * ll_misses
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The head and tail of a real callgrind 3.19 file (`/bin/true`).
    const SAMPLE: &str = "# callgrind format\nversion: 1\ncreator: callgrind-3.19.0\npid: 5442\n\
        cmd:  /bin/true\npart: 1\n\ndesc: I1 cache: 32768 B, 64 B, 8-way associative\n\n\
        positions: line\nevents: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw\n\
        summary: 128707 28304 11769 1083 920 574 1065 782 547\n\nob=(1) ld.so\nfn=(248) f\n30 18 0 6 1\n\
        totals: 128705 28304 11769 1082 920 574 1064 782 547\n";

    #[test]
    fn totals_are_read_from_a_callgrind_file() {
        let t = parse(SAMPLE).unwrap();
        assert_eq!(t.creator, "callgrind-3.19.0");
        assert_eq!(t.get("Ir"), 128_705);
        assert_eq!(t.get("DLmw"), 547);
        assert_eq!(t.get("absent"), 0);
        // No cache simulation: only Ir, and a summary without totals.
        let t = parse("events: Ir\nsummary: 42\n").unwrap();
        assert_eq!(t.events, vec![("Ir".to_string(), 42)]);
        // Trailing zero columns left out.
        let t = parse("events: Ir Dr Dw\ntotals: 10\n").unwrap();
        assert_eq!((t.get("Ir"), t.get("Dw")), (10, 0));
    }

    #[test]
    fn malformed_files_name_what_is_missing() {
        assert!(parse("").unwrap_err().contains("events:"));
        assert!(parse("events: Ir\n").unwrap_err().contains("totals"));
        assert!(parse("events: Ir\ntotals: x\n").unwrap_err().contains("bad total"));
        assert!(parse("events: Ir\ntotals: 1 2\n").unwrap_err().contains("2 totals for 1 events"));
    }

    #[test]
    fn per_iteration_figures_and_estimated_cycles() {
        let t = parse(SAMPLE).unwrap();
        let c = Counts::from_totals(&t, 5, "avx2".into(), vec!["avx2".into()], 1);
        assert_eq!(c.instructions, 128_705.0 / 5.0);
        assert_eq!(c.l1_misses, (1082 + 920 + 574) as f64 / 5.0);
        assert_eq!(c.ll_misses, (1064 + 782 + 547) as f64 / 5.0);
        // 100 accesses, 10 L1 misses of which 2 miss LL: 90 + 5 x 8 + 35 x 2.
        assert_eq!(estimated_cycles(100.0, 10.0, 2.0), 200.0);
        assert!(c.brief().contains("avx2") && c.brief().contains("callgrind-3.19.0"));
    }

    #[test]
    fn counts_at_other_isas_or_threads_are_incomparable() {
        let t = parse(SAMPLE).unwrap();
        let a = Counts::from_totals(&t, 1, "avx2".into(), vec!["avx2".into()], 1);
        let b = Counts::from_totals(&t, 1, "avx512".into(), vec!["avx512f".into()], 1);
        assert!(a.incomparable(&a.clone()).is_none());
        assert!(a.incomparable(&b).unwrap().contains("different ISAs"));
        let c = Counts { threads: 2, ..a.clone() };
        assert!(a.incomparable(&c).unwrap().contains("thread"));
    }

    #[test]
    fn requests_are_no_ops_on_a_cpu() {
        // The test binary does not run under Valgrind: the magic sequence
        // returns the default and changes nothing.
        if !on_valgrind() {
            start_instrumentation();
            zero_stats();
            stop_instrumentation();
            assert!(!on_valgrind());
        }
    }
}
