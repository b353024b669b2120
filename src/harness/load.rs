//! How much CPU other work took while a case ran: the machine's load,
//! measured, not inferred from a timing.
//!
//! On a shared 2-core host another process sometimes holds a core for
//! seconds, and a case on two threads then waits for its slower half. A
//! timed canary misses it (a one-thread canary runs on the free core; a
//! parallel one mostly measures how long sleeping pool threads take to
//! wake). The kernel counts it directly: `/proc/stat` has each CPU's busy
//! and stolen time, `/proc/self/stat` this process's own. Read before and
//! after every case-round, the difference is the CPU time everyone else
//! used on the CPUs this process may run on, and the time the hypervisor
//! gave to other guests. `compare::disturbance` decides from these figures
//! which rounds to set aside.
//!
//! Linux only; elsewhere (or when `/proc` cannot be read) nothing is
//! recorded and nothing is set aside. Figures are in clock ticks of
//! `USER_HZ` (100 per second on Linux's ABI), so one reading is only good
//! to 10 ms per CPU: the comparison ignores anything below a few ticks.

use crate::results::LoadSample;
use std::time::Instant;

/// Nanoseconds per `/proc/stat` tick (`USER_HZ` = 100 on Linux).
const TICK_NS: f64 = 1e7;

/// The counters at one moment.
#[derive(Debug, Clone)]
pub struct Snapshot {
    at: Instant,
    /// Busy ticks (user, nice, system, irq, softirq) summed over the CPUs
    /// this process may run on.
    busy: u64,
    /// Stolen ticks over the same CPUs.
    steal: u64,
    /// This process's own user + system ticks.
    own: u64,
    /// How many CPUs this process may run on.
    cpus: u32,
}

/// Reads the counters now, or `None` where `/proc` has none.
pub fn snapshot() -> Option<Snapshot> {
    snapshot_with(&[])
}

/// Reads the counters now, counting the CPU time of the processes `pids`
/// (`tfbench ab`'s workers) as this process's own: what they use is the
/// measurement, not other work. `None` where `/proc` has none, or where a
/// worker's figures cannot be read (it exited): a reading that would count
/// the measured work as a disturbance is worse than none.
pub fn snapshot_with(pids: &[u32]) -> Option<Snapshot> {
    let at = Instant::now();
    let allowed = std::fs::read_to_string("/proc/self/status").ok().and_then(|s| allowed_cpus(&s));
    let (busy, steal, cpus) = cpu_ticks(&std::fs::read_to_string("/proc/stat").ok()?, allowed.as_deref())?;
    let mut own = own_ticks(&std::fs::read_to_string("/proc/self/stat").ok()?)?;
    for pid in pids {
        own += own_ticks(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)?;
    }
    Some(Snapshot { at, busy, steal, own, cpus })
}

/// What other work took between `a` and `b`, for `case` in `round`; the run
/// has `threads` worker threads.
pub fn between(a: &Snapshot, b: &Snapshot, case: &str, round: u32, threads: usize) -> LoadSample {
    let ticks = |x: u64, y: u64| y.saturating_sub(x) as f64 * TICK_NS;
    LoadSample {
        case: case.to_string(),
        round,
        wall_ns: b.at.duration_since(a.at).as_nanos() as f64,
        others_ns: (ticks(a.busy, b.busy) - ticks(a.own, b.own)).max(0.0),
        steal_ns: ticks(a.steal, b.steal),
        cpus: b.cpus,
        threads: threads as u32,
    }
}

/// The CPUs of `Cpus_allowed_list:` in `/proc/self/status` (`0-3,8,10-11`).
fn allowed_cpus(status: &str) -> Option<Vec<u32>> {
    let list = status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:"))?.trim();
    let mut out = Vec::new();
    for part in list.split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((lo, hi)) => out.extend(lo.trim().parse::<u32>().ok()?..=hi.trim().parse::<u32>().ok()?),
            None => out.push(part.trim().parse().ok()?),
        }
    }
    (!out.is_empty()).then_some(out)
}

/// Busy and stolen ticks summed over the `cpuN` lines of `/proc/stat`
/// whose N is allowed (all of them when `allowed` is `None`), and how many
/// lines were summed.
fn cpu_ticks(stat: &str, allowed: Option<&[u32]>) -> Option<(u64, u64, u32)> {
    let (mut busy, mut steal, mut n) = (0u64, 0u64, 0u32);
    for line in stat.lines() {
        let mut words = line.split_ascii_whitespace();
        let Some(cpu) = words.next().and_then(|w| w.strip_prefix("cpu")).and_then(|i| i.parse::<u32>().ok())
        else {
            continue;
        };
        if allowed.is_some_and(|a| !a.contains(&cpu)) {
            continue;
        }
        // user nice system idle iowait irq softirq steal guest guest_nice;
        // guest time is already inside user and nice.
        let v: Vec<u64> = words.take(8).map(|w| w.parse().unwrap_or(0)).collect();
        if v.len() < 8 {
            return None;
        }
        busy += v[0] + v[1] + v[2] + v[5] + v[6];
        steal += v[7];
        n += 1;
    }
    (n > 0).then_some((busy, steal, n))
}

/// User + system ticks of `/proc/self/stat` (fields 14 and 15; the command
/// name before them may hold spaces and parentheses, so count from the
/// last `)`).
fn own_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_ascii_whitespace().collect();
    // `rest` starts at field 3 (state): utime is field 14, stime 15.
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_files_are_parsed_as_the_kernel_writes_them() {
        assert_eq!(allowed_cpus("Name:\tx\nCpus_allowed_list:\t0-2,5,7-8\n"), Some(vec![0, 1, 2, 5, 7, 8]));
        assert_eq!(allowed_cpus("Cpus_allowed_list:\t3\n"), Some(vec![3]));
        assert_eq!(allowed_cpus("nothing here"), None);
        let stat = "cpu  30 0 10 900 0 0 0 5 0 0\n\
                    cpu0 10 1 2 400 3 4 5 6 0 0\n\
                    cpu1 20 0 8 500 0 0 0 1 0 0\n\
                    intr 1 2 3\n";
        assert_eq!(cpu_ticks(stat, None), Some((10 + 1 + 2 + 4 + 5 + 20 + 8, 7, 2)));
        assert_eq!(cpu_ticks(stat, Some(&[1])), Some((28, 1, 1)));
        assert_eq!(cpu_ticks("cpu0 1 2\n", None), None, "a short line is not guessed at");
        let own = "1234 (tf (bench) x) R 1 2 3 4 5 6 7 8 9 10 250 70 0 0 20 0 3";
        assert_eq!(own_ticks(own), Some(320));
    }

    #[test]
    fn a_snapshot_pair_gives_non_negative_figures_here() {
        // Linux CI and dev hosts have /proc; elsewhere there is nothing to
        // check, and the function says so by returning None.
        let Some(a) = snapshot() else { return };
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = x.wrapping_add(std::hint::black_box(i));
        }
        std::hint::black_box(x);
        let b = snapshot().expect("second read");
        let s = between(&a, &b, "c", 1, 2);
        assert!(s.wall_ns > 0.0 && s.others_ns >= 0.0 && s.steal_ns >= 0.0 && s.cpus >= 1);
        assert_eq!((s.case.as_str(), s.round, s.threads), ("c", 1, 2));
    }

    #[test]
    fn other_processes_counted_as_own_are_read_and_a_gone_one_refuses() {
        let me = std::process::id();
        let (Some(one), Some(twice)) = (snapshot(), snapshot_with(&[me])) else { return };
        // Counting this process twice adds its own ticks once more.
        assert!(twice.own >= 2 * one.own, "{} vs {}", twice.own, one.own);
        // No process has pid 0 in /proc: the reading is refused, not guessed.
        assert!(snapshot_with(&[0]).is_none());
    }
}
