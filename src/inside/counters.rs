//! Hardware counters per iteration (cycles, instructions, IPC, cache and
//! branch misses) through `perf_event_open`, counted in an extra untimed
//! call after a case's samples, as allocations are: counting is never on
//! while a sample is timed.
//!
//! The syscall is made through `libc` with the attribute block written out
//! here (the 112-byte `PERF_ATTR_SIZE_VER5` layout; the kernel accepts any
//! published size), which needs no crate beyond the `libc` tfbench already
//! uses. Every thread of the process is counted (one event per thread, as
//! `perf stat -p` does), user space only (`exclude_kernel`, which
//! `perf_event_paranoid` 2 allows).
//!
//! Where the machine exposes no PMU (most cloud VMs: `perf_event_open` for
//! a hardware event fails with ENOENT or EOPNOTSUPP), [`availability`]
//! says why once, the run and `sysinfo` print that line, and no figure is
//! recorded: a counter that could not be read is absent, never zero.

use serde::{Deserialize, Serialize};

/// Counters per iteration of one untimed call; an event the machine could
/// not count is `None`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct HwCounters {
    /// Iterations of the counted call.
    pub iterations: u64,
    /// Core cycles per iteration (user space).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cycles: Option<f64>,
    /// Instructions retired per iteration (user space).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<f64>,
    /// Instructions per cycle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipc: Option<f64>,
    /// Last-level cache references per iteration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_references: Option<f64>,
    /// Last-level cache misses per iteration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_misses: Option<f64>,
    /// Branch instructions per iteration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branches: Option<f64>,
    /// Mispredicted branches per iteration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch_misses: Option<f64>,
}

/// The events counted, `PERF_TYPE_HARDWARE` configs in [`HwCounters`]'s order.
const EVENTS: [(u64, &str); 6] = [
    (0, "cycles"),
    (1, "instructions"),
    (2, "cache-references"),
    (3, "cache-misses"),
    (4, "branches"),
    (5, "branch-misses"),
];

impl HwCounters {
    /// Per-iteration figures from raw totals (in [`EVENTS`]' order; `None`
    /// where an event could not be counted) of a call of `iterations`.
    pub fn from_totals(totals: &[Option<u64>; 6], iterations: u64) -> Self {
        let n = iterations.max(1) as f64;
        let per = |i: usize| totals[i].map(|v| v as f64 / n);
        let (cycles, instructions) = (per(0), per(1));
        Self {
            iterations,
            cycles,
            instructions,
            ipc: match (instructions, cycles) {
                (Some(i), Some(c)) if c > 0.0 => Some(i / c),
                _ => None,
            },
            cache_references: per(2),
            cache_misses: per(3),
            branches: per(4),
            branch_misses: per(5),
        }
    }

    /// One line for a case's notes, figures that exist only.
    pub fn brief(&self) -> String {
        let mut parts = Vec::new();
        let mut add = |name: &str, v: Option<f64>| {
            if let Some(v) = v {
                parts.push(format!("{} {name}", super::si(v)));
            }
        };
        add("cycles", self.cycles);
        add("instructions", self.instructions);
        add("cache misses", self.cache_misses);
        add("branch misses", self.branch_misses);
        let mut line = parts.join(", ");
        if let Some(ipc) = self.ipc {
            line.push_str(&format!(", IPC {ipc:.2}"));
        }
        format!("hardware counters per iteration: {line}")
    }
}

/// Why hardware counters cannot be read here, from an errno of
/// `perf_event_open` for a hardware event.
pub fn reason_for(errno: i32) -> String {
    match errno {
        libc::ENOENT | libc::EOPNOTSUPP | libc::ENODEV => format!(
            "this machine exposes no hardware performance counters (perf_event_open: {}; usual on cloud VMs)",
            errno_name(errno)
        ),
        libc::EACCES | libc::EPERM => {
            "perf_event_open is not permitted (kernel.perf_event_paranoid > 2, or a seccomp filter)"
                .to_string()
        }
        libc::ENOSYS => "this kernel has no perf_event_open".to_string(),
        e => format!("perf_event_open failed with errno {e}"),
    }
}

fn errno_name(e: i32) -> &'static str {
    match e {
        libc::ENOENT => "ENOENT",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::ENODEV => "ENODEV",
        _ => "error",
    }
}

/// `Ok(())` when hardware counters can be read in this process, else why
/// not (checked once, then remembered).
pub fn availability() -> Result<(), String> {
    static CHECKED: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    CHECKED.get_or_init(sys::probe).clone()
}

/// Counts `f` on every thread of the process: the totals of [`EVENTS`]
/// (`None` for an event that could not be opened), or why nothing could be
/// counted.
pub fn count<R>(f: impl FnOnce() -> R) -> Result<(R, [Option<u64>; 6]), String> {
    availability()?;
    sys::count(f)
}

#[cfg(target_os = "linux")]
mod sys {
    use super::EVENTS;

    /// `struct perf_event_attr`, `PERF_ATTR_SIZE_VER5` (112 bytes).
    #[repr(C)]
    #[derive(Default)]
    struct Attr {
        kind: u32,
        size: u32,
        config: u64,
        sample_period: u64,
        sample_type: u64,
        read_format: u64,
        /// The bit fields: disabled (0), exclude_kernel (5), exclude_hv (6).
        flags: u64,
        wakeup_events: u32,
        bp_type: u32,
        config1: u64,
        config2: u64,
        branch_sample_type: u64,
        sample_regs_user: u64,
        sample_stack_user: u32,
        clockid: i32,
        sample_regs_intr: u64,
        aux_watermark: u32,
        sample_max_stack: u16,
        reserved: u16,
    }

    const DISABLED: u64 = 1;
    const EXCLUDE_KERNEL: u64 = 1 << 5;
    const EXCLUDE_HV: u64 = 1 << 6;
    const IOC_ENABLE: u64 = 0x2400;
    const IOC_DISABLE: u64 = 0x2401;

    /// An open counter, closed on drop.
    struct Fd(i32);
    impl Drop for Fd {
        fn drop(&mut self) {
            // SAFETY: the fd was returned by perf_event_open and is owned here.
            unsafe { libc::close(self.0) };
        }
    }

    /// Opens hardware event `config` on thread `tid` (0: the caller).
    fn open(config: u64, tid: i32) -> Result<Fd, i32> {
        let attr = Attr {
            kind: 0, // PERF_TYPE_HARDWARE
            size: std::mem::size_of::<Attr>() as u32,
            config,
            flags: DISABLED | EXCLUDE_KERNEL | EXCLUDE_HV,
            ..Default::default()
        };
        // SAFETY: `attr` is a valid perf_event_attr of the size it states,
        // alive for the call; the other arguments are plain integers.
        let fd = unsafe {
            libc::syscall(libc::SYS_perf_event_open, &attr as *const Attr, tid, -1i32, -1i32, 0u64)
        };
        if fd < 0 {
            Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
        } else {
            Ok(Fd(fd as i32))
        }
    }

    pub(super) fn probe() -> Result<(), String> {
        open(EVENTS[1].0, 0).map(drop).map_err(super::reason_for)
    }

    fn threads() -> Vec<i32> {
        std::fs::read_dir("/proc/self/task")
            .map(|d| d.flatten().filter_map(|e| e.file_name().to_str()?.parse().ok()).collect())
            .unwrap_or_default()
    }

    fn ioctl(fd: &Fd, req: u64) {
        // SAFETY: an enable/disable request on a perf event fd we own.
        unsafe { libc::ioctl(fd.0, req as _, 0) };
    }

    fn read(fd: &Fd) -> Option<u64> {
        let mut v = 0u64;
        // SAFETY: reads 8 bytes (the count, read_format 0) into `v`.
        let n = unsafe { libc::read(fd.0, &mut v as *mut u64 as *mut libc::c_void, 8) };
        (n == 8).then_some(v)
    }

    pub(super) fn count<R>(f: impl FnOnce() -> R) -> Result<(R, [Option<u64>; 6]), String> {
        let tids = threads();
        // Per event, one fd per thread; an event no thread could open is None.
        let fds: Vec<Vec<Fd>> =
            EVENTS.iter().map(|(c, _)| tids.iter().filter_map(|&t| open(*c, t).ok()).collect()).collect();
        if fds.iter().all(Vec::is_empty) {
            return Err("no hardware event could be opened on this process's threads".into());
        }
        fds.iter().flatten().for_each(|fd| ioctl(fd, IOC_ENABLE));
        let out = f();
        fds.iter().flatten().for_each(|fd| ioctl(fd, IOC_DISABLE));
        let mut totals = [None; 6];
        for (i, per_thread) in fds.iter().enumerate() {
            if !per_thread.is_empty() {
                totals[i] = per_thread.iter().map(read).sum::<Option<u64>>();
            }
        }
        Ok((out, totals))
    }
}

#[cfg(not(target_os = "linux"))]
mod sys {
    pub(super) fn probe() -> Result<(), String> {
        Err("hardware counters are read through Linux's perf_event_open; this is not Linux".into())
    }
    pub(super) fn count<R>(_f: impl FnOnce() -> R) -> Result<(R, [Option<u64>; 6]), String> {
        Err(probe().unwrap_err())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_iteration_figures_and_ipc() {
        let c = HwCounters::from_totals(&[Some(2000), Some(5000), None, Some(10), Some(400), Some(4)], 10);
        assert_eq!(c.cycles, Some(200.0));
        assert_eq!(c.instructions, Some(500.0));
        assert_eq!(c.ipc, Some(2.5));
        assert_eq!(c.cache_references, None);
        assert_eq!(c.branch_misses, Some(0.4));
        let b = c.brief();
        assert!(b.contains("IPC 2.50") && !b.contains("cache references"), "{b}");
        // No cycles: no IPC, and nothing written as zero.
        let c = HwCounters::from_totals(&[None, Some(5), None, None, None, None], 1);
        assert_eq!(c.ipc, None);
        assert!(!c.brief().contains("cycles"));
        let json = serde_json::to_string(&c).unwrap();
        assert!(!json.contains("cycles") && !json.contains("null"), "{json}");
    }

    #[test]
    fn reasons_name_the_cause() {
        assert!(reason_for(libc::ENOENT).contains("no hardware performance counters"));
        assert!(reason_for(libc::ENOENT).contains("ENOENT"));
        assert!(reason_for(libc::EACCES).contains("perf_event_paranoid"));
        assert!(reason_for(12345).contains("12345"));
    }

    #[test]
    fn counting_works_or_says_why_not() {
        // On a VM without a PMU: the reason, the same twice; with one: the
        // instructions of a loop are counted (more than its iterations).
        match count(|| (0..100_000u64).map(std::hint::black_box).sum::<u64>()) {
            Ok((sum, totals)) => {
                assert_eq!(sum, 4_999_950_000);
                if let Some(i) = totals[1] {
                    assert!(i > 100_000, "{i} instructions for 100000 iterations");
                }
            }
            Err(why) => {
                assert!(!why.is_empty());
                assert_eq!(availability().unwrap_err(), why);
            }
        }
    }
}
