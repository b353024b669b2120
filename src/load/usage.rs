//! What a run cost the machine: CPU time (user and system, from
//! `getrusage` for this process and `/proc/PID/stat` for a server process
//! named with `--server-pid`) against wall time and cores; energy from
//! Linux powercap (RAPL: CPU package and DRAM) where the machine exposes
//! it, and where it does not, a plain statement of that, never an estimate;
//! and money, from a price per hour.

use anyhow::{Result, bail};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// CPU seconds (user, system) of this process.
fn self_cpu() -> (f64, f64) {
    // SAFETY: getrusage fills one rusage we own.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; RUSAGE_SELF is always valid.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return (0.0, 0.0);
    }
    let s = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    (s(ru.ru_utime), s(ru.ru_stime))
}

/// CPU seconds (user, system) of process `pid`, from `/proc/PID/stat`.
pub fn proc_cpu(pid: u32) -> Option<(f64, f64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&text)
}

fn parse_stat(text: &str) -> Option<(f64, f64)> {
    // The name (field 2) may hold spaces and parentheses: fields after the last `)`.
    let rest = &text[text.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state is field 3, utime field 14, stime field 15.
    let (u, s): (f64, f64) = (f.get(11)?.parse().ok()?, f.get(12)?.parse().ok()?);
    // SAFETY: sysconf has no memory effects.
    let tick = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let tick = if tick > 0 { tick as f64 } else { 100.0 };
    Some((u / tick, s / tick))
}

/// One RAPL zone's energy counter.
#[derive(Debug, Clone)]
struct Zone {
    name: String,
    path: PathBuf,
    max_uj: u64,
    start_uj: u64,
}

fn read_u64(p: &Path) -> Option<u64> {
    std::fs::read_to_string(p).ok()?.trim().parse().ok()
}

/// The RAPL zones under `root` (`/sys/class/powercap`), or why there are none.
fn rapl_zones(root: &Path) -> Result<Vec<Zone>, String> {
    let dir =
        std::fs::read_dir(root).map_err(|_| format!("no energy meter: {} does not exist", root.display()))?;
    let mut zones = Vec::new();
    for e in dir.flatten() {
        let p = e.path();
        let energy = p.join("energy_uj");
        let Some(start_uj) = read_u64(&energy) else { continue };
        let name = std::fs::read_to_string(p.join("name")).map(|s| s.trim().to_string()).unwrap_or_default();
        let max_uj = read_u64(&p.join("max_energy_range_uj")).unwrap_or(u64::MAX);
        zones.push(Zone {
            name: format!("{} ({name})", e.file_name().to_string_lossy()),
            path: energy,
            max_uj,
            start_uj,
        });
    }
    if zones.is_empty() {
        return Err(format!("no energy meter: no readable energy_uj under {}", root.display()));
    }
    zones.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(zones)
}

/// A meter started before a run.
pub struct Meter {
    t0: Instant,
    cpu0: (f64, f64),
    server: Option<(u32, (f64, f64))>,
    zones: Result<Vec<Zone>, String>,
}

/// What a [`Meter`] read over a run.
#[derive(Debug, Clone, Serialize)]
pub struct Usage {
    /// Wall seconds.
    pub wall_s: f64,
    /// Logical CPUs of the machine.
    pub cores: usize,
    /// This process: user CPU seconds.
    pub user_s: f64,
    /// This process: system CPU seconds.
    pub system_s: f64,
    /// This process: (user + system) / (wall x cores).
    pub utilisation: f64,
    /// The server process (`--server-pid`): user and system CPU seconds, utilisation.
    pub server: Option<(f64, f64, f64)>,
    /// Joules per RAPL zone, or why there is no figure.
    pub energy: Result<Vec<(String, f64)>, String>,
    /// Mean watts over the run, all zones (with a meter).
    pub watts: Option<f64>,
}

impl Meter {
    /// Starts metering; `server_pid` also meters that process.
    pub fn start(server_pid: Option<u32>) -> Self {
        Self::start_at(server_pid, Path::new("/sys/class/powercap"))
    }

    fn start_at(server_pid: Option<u32>, powercap: &Path) -> Self {
        let server = server_pid.and_then(|p| proc_cpu(p).map(|c| (p, c)));
        Self { t0: Instant::now(), cpu0: self_cpu(), server, zones: rapl_zones(powercap) }
    }

    /// Reads everything since [`Meter::start`].
    pub fn read(&self) -> Usage {
        let wall = self.t0.elapsed().as_secs_f64().max(1e-9);
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let (u, s) = self_cpu();
        let (user_s, system_s) = (u - self.cpu0.0, s - self.cpu0.1);
        let server = self.server.and_then(|(pid, (u0, s0))| {
            let (u, s) = proc_cpu(pid)?;
            Some((u - u0, s - s0, (u - u0 + s - s0) / (wall * cores as f64)))
        });
        let energy = self.zones.clone().map(|zs| {
            zs.iter()
                .map(|z| {
                    let now = read_u64(&z.path).unwrap_or(z.start_uj);
                    // The counter wraps at max_energy_range_uj.
                    let d = if now >= z.start_uj { now - z.start_uj } else { now + (z.max_uj - z.start_uj) };
                    (z.name.clone(), d as f64 * 1e-6)
                })
                .collect::<Vec<_>>()
        });
        let watts = energy.as_ref().ok().map(|e| e.iter().map(|(_, j)| j).sum::<f64>() / wall);
        Usage {
            wall_s: wall,
            cores,
            user_s,
            system_s,
            utilisation: (user_s + system_s) / (wall * cores as f64),
            server,
            energy,
            watts,
        }
    }
}

/// A price per hour with its currency (`0.42USD`, `USD0.42`, `0.42 EUR`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Price {
    /// Amount per hour.
    pub per_hour: f64,
    /// ISO 4217 code, upper case.
    pub currency: String,
}

impl Price {
    /// Parses a price; a bare number (no currency) is an error.
    pub fn parse(s: &str) -> Result<Self> {
        let t = s.trim();
        let letters: String = t.chars().filter(|c| c.is_ascii_alphabetic()).collect();
        let number: String = t.chars().filter(|c| !c.is_ascii_alphabetic() && !c.is_whitespace()).collect();
        let code_ok = letters.len() == 3 && (t.starts_with(&letters) || t.ends_with(&letters));
        if letters.is_empty() {
            bail!("price {s:?} has no currency: write it as 0.42USD (ISO 4217 code)");
        }
        if !code_ok {
            bail!(
                "price {s:?}: the currency must be a three-letter code before or after the amount (0.42USD)"
            );
        }
        let per_hour: f64 =
            number.parse().map_err(|_| anyhow::anyhow!("price {s:?}: {number:?} is not a number"))?;
        if !(per_hour.is_finite() && per_hour > 0.0) {
            bail!("price {s:?} must be positive");
        }
        Ok(Self { per_hour, currency: letters.to_ascii_uppercase() })
    }

    /// Cost of `wall_s` seconds of the machine.
    pub fn of(&self, wall_s: f64) -> f64 {
        self.per_hour * wall_s / 3600.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_stat_fields_after_a_name_with_spaces() {
        let line = "42 (my (odd) name) S 1 42 42 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 1 0 100 0 0";
        let (u, s) = parse_stat(line).unwrap();
        // SAFETY: sysconf has no memory effects.
        let tick = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
        assert!((u - 250.0 / tick).abs() < 1e-12 && (s - 75.0 / tick).abs() < 1e-12);
        assert!(proc_cpu(std::process::id()).is_some());
    }

    #[test]
    fn rapl_zones_are_read_and_a_missing_meter_is_said() {
        let dir = std::env::temp_dir().join(format!("tfbench-rapl-{}", std::process::id()));
        let z = dir.join("intel-rapl:0");
        std::fs::create_dir_all(&z).unwrap();
        std::fs::write(z.join("name"), "package-0\n").unwrap();
        std::fs::write(z.join("energy_uj"), "1000000\n").unwrap();
        std::fs::write(z.join("max_energy_range_uj"), "262143328850\n").unwrap();
        let m = Meter::start_at(None, &dir);
        std::fs::write(z.join("energy_uj"), "3500000\n").unwrap();
        let u = m.read();
        let e = u.energy.unwrap();
        assert_eq!(e.len(), 1);
        assert!((e[0].1 - 2.5).abs() < 1e-9 && e[0].0.contains("package-0"));
        assert!(u.watts.unwrap() > 0.0);
        std::fs::remove_dir_all(&dir).unwrap();
        let none = Meter::start_at(None, &dir).read();
        assert!(none.energy.unwrap_err().starts_with("no energy meter") && none.watts.is_none());
    }

    #[test]
    fn prices_need_a_currency() {
        assert_eq!(Price::parse("0.42USD").unwrap(), Price { per_hour: 0.42, currency: "USD".into() });
        assert_eq!(Price::parse("eur 1.5").unwrap().currency, "EUR");
        assert!(Price::parse("0.42").unwrap_err().to_string().contains("no currency"));
        assert!(Price::parse("0USD").is_err());
        assert!(Price::parse("-1USD").is_err());
        assert!(Price::parse("1.0 dollars").is_err());
        assert!((Price::parse("3.6USD").unwrap().of(10.0) - 0.01).abs() < 1e-12);
    }
}
