//! Device profiles (`configs/devices/*.toml`, embedded): what a phone, a
//! board or a browser tab offers, and what of it this machine can impose
//! for real: the thread count (through the case's execution context), the
//! memory budget (checked before allocating) and the widest SIMD (through
//! the ISA cap, [`crate::isa`]). Clock speed and memory bandwidth cannot be
//! emulated: cases run at this machine's, and say so ([`Profile::note`]).

use crate::isa::IsaLevel;
use anyhow::{Context as _, Result, bail};
use serde::Deserialize;

/// The shipped profiles, `(file, text)`.
const FILES: &[(&str, &str)] = &[
    ("pixel8.toml", include_str!("../../../configs/devices/pixel8.toml")),
    ("galaxy-a54.toml", include_str!("../../../configs/devices/galaxy-a54.toml")),
    ("rpi5.toml", include_str!("../../../configs/devices/rpi5.toml")),
    ("browser-tab.toml", include_str!("../../../configs/devices/browser-tab.toml")),
];

/// The `profile` parameter's values: each profile's name with `-emulated`,
/// so every case id says it runs an emulation.
pub const NAMES: &[&str] =
    &["pixel8-emulated", "galaxy-a54-emulated", "rpi5-emulated", "browser-tab-emulated"];

/// Extra folders of the user's profiles, `:`-separated, searched before
/// `./configs/devices`.
pub const DIRS_VAR: &str = "TFBENCH_DEVICE_PROFILES";

/// Folders searched for a user's profile `NAME.toml`: `$TFBENCH_DEVICE_PROFILES`,
/// then `./configs/devices` (a project's own profiles beside its configs).
pub fn user_dirs() -> Vec<std::path::PathBuf> {
    let mut dirs: Vec<std::path::PathBuf> = std::env::var_os(DIRS_VAR)
        .map(|v| std::env::split_paths(&v).filter(|p| !p.as_os_str().is_empty()).collect())
        .unwrap_or_default();
    let local = std::path::PathBuf::from("configs/devices");
    if local.is_dir() {
        dirs.push(local);
    }
    dirs
}

/// Every profile name a `profile` parameter can take: the shipped ones,
/// then the user's (`NAME-emulated` for each readable `NAME.toml` in
/// [`user_dirs`] that is not a shipped name).
pub fn known_names() -> Vec<String> {
    known_names_in(&user_dirs())
}

/// [`known_names`] with the user's folders given.
pub fn known_names_in(dirs: &[std::path::PathBuf]) -> Vec<String> {
    let mut names: Vec<String> = NAMES.iter().map(|n| n.to_string()).collect();
    for dir in dirs {
        let Ok(entries) = std::fs::read_dir(dir) else { continue };
        let mut found: Vec<String> = entries
            .filter_map(|e| {
                let path = e.ok()?.path();
                (path.extension()? == "toml").then_some(())?;
                path.file_stem()?.to_str().map(str::to_string)
            })
            .filter(|stem| is_profile_name(stem))
            .map(|stem| format!("{stem}-emulated"))
            .filter(|n| !names.contains(n))
            .collect();
        found.sort();
        names.extend(found);
    }
    names
}

/// The `profile` parameter's rule: a known profile, checked when the plan
/// is built (so a typo stops the run before anything runs).
pub fn check_param(v: &crate::plan::ParamValue) -> Result<(), String> {
    match v {
        crate::plan::ParamValue::Str(s) => Profile::find(s).map(|_| ()).map_err(|e| format!("{e:#}")),
        _ => Err(format!("must be a profile name; known: {}", known_names().join(", "))),
    }
}

/// Lower-case letters, digits and `-`: what a case id can carry unquoted.
fn is_profile_name(s: &str) -> bool {
    !s.is_empty() && s.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

/// A device profile.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// Short name (`pixel8`).
    pub name: String,
    /// What the device is.
    pub description: String,
    /// Its cores.
    pub cores: Cores,
    /// Its memory.
    pub memory: Memory,
    /// Its vector unit.
    pub simd: Simd,
    /// Its thermal model's parameters (`thermal.rs`).
    pub thermal: Thermal,
}

/// Cores, big.LITTLE split.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Cores {
    /// Fast cores (prime and performance clusters).
    pub big: usize,
    /// Efficiency cores.
    pub little: usize,
}

/// Memory of the device and of one app on it.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Memory {
    /// Installed memory.
    pub total_bytes: u64,
    /// What one app can count on; cases refuse to allocate beyond it.
    pub budget_bytes: u64,
}

/// The vector unit.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Simd {
    /// Widest vector in bits (128 for NEON, SVE2 at 128, SIMD128).
    pub widest_bits: u32,
}

/// Lumped RC thermal model and duty-cycle governor (`thermal.rs`).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Thermal {
    /// Power at full duty, watts.
    pub power_max_w: f64,
    /// Power when idle, watts.
    pub power_idle_w: f64,
    /// Thermal resistance to ambient, kelvin per watt.
    pub r_th_k_per_w: f64,
    /// Thermal capacitance, joules per kelvin.
    pub c_th_j_per_k: f64,
    /// Ambient temperature, Celsius.
    pub ambient_c: f64,
    /// The governor throttles at this temperature...
    pub throttle_c: f64,
    /// ...and releases at this one.
    pub release_c: f64,
    /// Duty cycle while throttled, 0 to 1.
    pub throttled_duty: f64,
}

/// ncnn's `powersave` values: 0 = all cores, 1 = little cores, 2 = big cores.
pub const POWERSAVE: &[&str] = &["0", "1", "2"];

impl Profile {
    /// Parses and checks one profile file; `file` is the path errors name.
    pub fn parse(file: &str, text: &str) -> Result<Profile> {
        let p: Profile = toml::from_str(text).with_context(|| file.to_string())?;
        let t = &p.thermal;
        let ok = p.cores.big + p.cores.little >= 1
            && p.memory.budget_bytes >= 1
            && p.memory.budget_bytes <= p.memory.total_bytes
            && [128, 256, 512].contains(&p.simd.widest_bits)
            && t.r_th_k_per_w > 0.0
            && t.c_th_j_per_k > 0.0
            && t.power_max_w >= t.power_idle_w
            && t.power_idle_w >= 0.0
            && t.release_c < t.throttle_c
            && t.throttled_duty > 0.0
            && t.throttled_duty <= 1.0;
        if !ok {
            bail!(
                "{file}: needs at least one core, 0 < budget <= total memory, widest_bits 128/256/512, positive R and C, max power >= idle power >= 0, release < throttle temperature, 0 < throttled_duty <= 1"
            );
        }
        if !is_profile_name(&p.name) {
            bail!(
                "{file}: name {:?} must be lower-case letters, digits and `-` (it is part of case ids)",
                p.name
            );
        }
        Ok(p)
    }

    /// The profile a `profile` parameter names (`pixel8-emulated`): a
    /// shipped one, else the user's `NAME.toml` in a profile folder
    /// ([`user_dirs`]). An unknown name is an error listing the known ones.
    pub fn find(param: &str) -> Result<Profile> {
        Profile::find_in(param, &user_dirs())
    }

    /// [`Profile::find`] with the user's folders given.
    pub fn find_in(param: &str, dirs: &[std::path::PathBuf]) -> Result<Profile> {
        let name = param.strip_suffix("-emulated").unwrap_or("");
        for (file, text) in FILES {
            let p = Profile::parse(&format!("configs/devices/{file} (shipped)"), text)?;
            if p.name == name {
                return Ok(p);
            }
        }
        if is_profile_name(name) {
            for dir in dirs {
                let path = dir.join(format!("{name}.toml"));
                if let Ok(text) = std::fs::read_to_string(&path) {
                    let p = Profile::parse(&path.display().to_string(), &text)?;
                    if p.name != name {
                        bail!(
                            "{}: its name is {:?}; a profile file is named after its profile",
                            path.display(),
                            p.name
                        );
                    }
                    return Ok(p);
                }
            }
        }
        let shown: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
        bail!(
            "unknown device profile `{param}`; known: {} (a profile of your own: NAME.toml in {} or a folder in ${DIRS_VAR}, used as `NAME-emulated`)",
            known_names_in(dirs).join(", "),
            if shown.is_empty() { "./configs/devices".to_string() } else { shown.join(", ") },
        )
    }

    /// The cores `powersave` selects (ncnn's 0 = all, 1 = little, 2 = big);
    /// an error when the device has none of that kind.
    pub fn cores(&self, powersave: usize) -> Result<usize> {
        let n = match powersave {
            0 => self.cores.big + self.cores.little,
            1 => self.cores.little,
            2 => self.cores.big,
            _ => bail!("powersave must be 0 (all cores), 1 (little) or 2 (big), got {powersave}"),
        };
        if n == 0 {
            bail!("{} has no {} cores", self.name, if powersave == 1 { "little" } else { "big" });
        }
        Ok(n)
    }

    /// The ISA cap that stands for the device's widest SIMD: 128-bit
    /// vectors (NEON, SIMD128) map to `scalar`, tfbench's portable code,
    /// which the compiler vectorises with x86-64's baseline SSE2, 128 bits;
    /// 256 to `avx2`, 512 to `avx512`.
    pub fn isa_cap(&self) -> IsaLevel {
        match self.simd.widest_bits {
            128 => IsaLevel::Scalar,
            256 => IsaLevel::Avx2,
            _ => IsaLevel::Avx512,
        }
    }

    /// Refuses `bytes` beyond the profile's memory budget, with the figures.
    pub fn check_budget(&self, what: &str, bytes: u64) -> Result<(), String> {
        if bytes > self.memory.budget_bytes {
            return Err(format!(
                "{what} needs {} MiB; {}'s memory budget is {} MiB",
                bytes >> 20,
                self.name,
                self.memory.budget_bytes >> 20
            ));
        }
        Ok(())
    }

    /// What the emulation imposes and what it cannot, for the output.
    pub fn note(&self, threads: usize) -> String {
        format!(
            "{}-emulated ({}): {threads} threads, kernels capped at ISA level {} for its {}-bit SIMD, memory budget {} MiB checked before allocating; simulated/not emulated: its clock speed and memory bandwidth (this machine's are used)",
            self.name,
            self.description,
            self.isa_cap().name(),
            self.simd.widest_bits,
            self.memory.budget_bytes >> 20
        )
    }
}

/// Refuses a profile that asks for more threads or memory than this
/// machine has (`machine_threads`, `machine_bytes`), with the figures.
pub fn check_machine(
    p: &Profile,
    threads: usize,
    machine_threads: usize,
    machine_bytes: Option<u64>,
) -> Result<(), String> {
    if threads > machine_threads {
        return Err(format!(
            "{}-emulated asks for {threads} threads; this machine has {machine_threads}",
            p.name
        ));
    }
    if let Some(have) = machine_bytes
        && p.memory.budget_bytes > have
    {
        return Err(format!(
            "{}-emulated's memory budget is {} MiB; this machine has {} MiB",
            p.name,
            p.memory.budget_bytes >> 20,
            have >> 20
        ));
    }
    Ok(())
}

/// This machine's hardware threads and installed memory.
pub fn machine() -> (usize, Option<u64>) {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let bytes = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| crate::util::meminfo_bytes(&m, "MemTotal"));
    (threads, bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shipped_profile_parses_and_is_named() {
        assert_eq!(FILES.len(), NAMES.len());
        for name in NAMES {
            let p = Profile::find(name).unwrap();
            assert!(p.cores(0).unwrap() >= 1 && p.memory.budget_bytes > 0, "{name}");
            assert!(p.note(1).contains("not emulated") && p.note(1).contains("-emulated"));
        }
        let pixel = Profile::find("pixel8-emulated").unwrap();
        assert_eq!((pixel.cores(0).unwrap(), pixel.cores(1).unwrap(), pixel.cores(2).unwrap()), (9, 4, 5));
        assert_eq!(pixel.isa_cap(), IsaLevel::Scalar);
        assert!(
            Profile::find("rpi5-emulated").unwrap().cores(1).unwrap_err().to_string().contains("no little")
        );
    }

    #[test]
    fn bad_names_files_and_requests_are_refused_with_the_figures() {
        let e = Profile::find("iphone").unwrap_err().to_string();
        assert!(NAMES.iter().all(|n| e.contains(n)), "{e}");
        assert!(Profile::find("pixel8").is_err(), "the -emulated spelling is required");
        let p = Profile::find("rpi5-emulated").unwrap();
        let e = check_machine(&p, 4, 2, Some(64 << 30)).unwrap_err();
        assert!(e.contains("4 threads") && e.contains("has 2"), "{e}");
        let e = check_machine(&p, 1, 8, Some(1 << 30)).unwrap_err();
        assert!(e.contains("3072 MiB") && e.contains("1024 MiB"), "{e}");
        assert!(check_machine(&p, 1, 8, Some(64 << 30)).is_ok());
        let e = p.check_budget("the weights", 4 << 30).unwrap_err();
        assert!(e.contains("4096 MiB") && e.contains("3072 MiB"), "{e}");
        let bad = FILES[0].1.replace("widest_bits = 128", "widest_bits = 100");
        assert!(Profile::parse("x.toml", &bad).is_err());
        let unknown = format!("{}\nclock_ghz = 3.0\n", FILES[0].1);
        assert!(Profile::parse("x.toml", &unknown).is_err(), "unknown keys are refused");
    }

    #[test]
    fn a_users_profile_file_is_found_by_name_and_checked() {
        let dir = std::env::temp_dir().join(format!("tfbench-profiles-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mine = FILES[2].1.replace("name = \"rpi5\"", "name = \"my-board\"");
        std::fs::write(dir.join("my-board.toml"), &mine).unwrap();
        std::fs::write(dir.join("wrong-name.toml"), FILES[2].1).unwrap();
        std::fs::write(dir.join("broken.toml"), "name = \"broken\"\n").unwrap();
        std::fs::write(dir.join("notes.txt"), "not a profile").unwrap();
        let dirs = vec![dir.clone()];
        let p = Profile::find_in("my-board-emulated", &dirs).unwrap();
        assert_eq!((p.name.as_str(), p.cores(0).unwrap()), ("my-board", 4));
        assert!(p.note(1).starts_with("my-board-emulated"));
        let known = known_names_in(&dirs);
        assert!(
            known.contains(&"my-board-emulated".to_string()) && known.contains(&"pixel8-emulated".into())
        );
        assert!(!known.iter().any(|n| n.contains("notes")), "{known:?}");
        let e = format!("{:#}", Profile::find_in("wrong-name-emulated", &dirs).unwrap_err());
        assert!(e.contains("wrong-name.toml") && e.contains("\"rpi5\""), "{e}");
        let e = format!("{:#}", Profile::find_in("broken-emulated", &dirs).unwrap_err());
        assert!(e.contains("broken.toml"), "the file is named: {e}");
        let e = format!("{:#}", Profile::find_in("nothing-emulated", &dirs).unwrap_err());
        assert!(e.contains("my-board-emulated") && e.contains(&dir.display().to_string()), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
