//! Memory pressure (`tfbench load --memory-pressure SHARE`): a share of the
//! machine's RAM is taken while the scenario runs again, and the run is
//! compared with the unpressured one.
//!
//! A cgroup memory limit would hold the process itself to the rest; it is
//! used only where this process may create and enter a group of its own
//! (a delegated cgroup v2 subtree), which [`cgroup_unavailable`] checks and
//! explains. This build takes no cgroup path (none was available to test
//! it on), so the pressure is always a **balloon**: anonymous memory mapped
//! and every page written, so the kernel must back it, held until the run
//! ends. What it actually held is measured, not assumed: the pages resident
//! (`mincore`) right after filling and again at the end (the kernel may
//! have swapped some out under the pressure it makes).
//!
//! The balloon never takes more than the memory the kernel reports
//! available less [`RESERVE`]: the machine is shared, and a balloon that
//! pushed it into the OOM killer would end other people's work. Where that
//! caps the share asked, the report says so.

use anyhow::{Context, Result, bail};
use serde::Serialize;

/// Memory left to the rest of the machine whatever the share asked.
pub const RESERVE: u64 = 512 << 20;

/// `MemTotal` and `MemAvailable` of `/proc/meminfo`, in bytes.
pub fn meminfo() -> Result<(u64, u64)> {
    let text = std::fs::read_to_string("/proc/meminfo").context("reading /proc/meminfo")?;
    parse_meminfo(&text).context("/proc/meminfo has no MemTotal or MemAvailable")
}

fn parse_meminfo(text: &str) -> Option<(u64, u64)> {
    let field = |key: &str| {
        let line = text.lines().find(|l| l.starts_with(key))?;
        let kib: u64 = line[key.len()..].trim().trim_end_matches("kB").trim().parse().ok()?;
        Some(kib * 1024)
    };
    Some((field("MemTotal:")?, field("MemAvailable:")?))
}

/// Why no cgroup limit is set here (always `Some` in this build: the
/// reason, for the report).
pub fn cgroup_unavailable() -> Option<String> {
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let v2_only = own.lines().all(|l| l.starts_with("0::"));
    if !v2_only {
        return Some("not used: this machine has a cgroup v1 hierarchy (no delegated v2 subtree)".into());
    }
    let path = own.lines().next().and_then(|l| l.strip_prefix("0::")).unwrap_or("/").trim().to_string();
    let dir = std::path::Path::new("/sys/fs/cgroup").join(path.trim_start_matches('/'));
    let controllers = std::fs::read_to_string(dir.join("cgroup.controllers")).unwrap_or_default();
    if !controllers.split_whitespace().any(|c| c == "memory") {
        return Some(format!("not used: the memory controller is not enabled in {}", dir.display()));
    }
    Some(format!(
        "not used: moving this process into a child of {} is not implemented (balloon instead)",
        dir.display()
    ))
}

/// Anonymous memory with every page written: held until dropped.
pub struct Balloon {
    ptr: *mut libc::c_void,
    len: usize,
}

// SAFETY: the mapping is owned by the balloon alone and never read or written after filling.
unsafe impl Send for Balloon {}

/// What a balloon asked for and held.
#[derive(Debug, Clone, Serialize)]
pub struct BalloonReport {
    /// Share of RAM asked.
    pub share: f64,
    /// `MemTotal`.
    pub mem_total_bytes: u64,
    /// `MemAvailable` before filling.
    pub mem_available_before: u64,
    /// `share * MemTotal`.
    pub requested_bytes: u64,
    /// Mapped: the request, capped by `MemAvailable - RESERVE`.
    pub mapped_bytes: u64,
    /// Resident right after filling (`mincore`).
    pub held_bytes_start: u64,
    /// Why less than requested was mapped, if it was.
    pub capped: Option<String>,
}

fn page_size() -> usize {
    // SAFETY: sysconf has no memory effects.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 { p as usize } else { 4096 }
}

impl Balloon {
    /// Maps `share` of RAM (capped as the module says) and writes every page.
    pub fn inflate(share: f64) -> Result<(Self, BalloonReport)> {
        if !(share > 0.0 && share < 1.0) {
            bail!("--memory-pressure: a share of RAM must be in (0, 1), got {share}");
        }
        let (total, avail) = meminfo()?;
        let requested = (share * total as f64) as u64;
        let room = avail.saturating_sub(RESERVE);
        let capped = (requested > room).then(|| {
            format!(
                "capped at MemAvailable ({} MiB) less a {} MiB reserve for the rest of the machine",
                avail >> 20,
                RESERVE >> 20
            )
        });
        let page = page_size();
        let len = (requested.min(room) as usize) / page * page;
        if len == 0 {
            bail!("--memory-pressure {share}: no memory to take (MemAvailable {} MiB)", avail >> 20);
        }
        // SAFETY: a fresh private anonymous mapping; checked for failure below.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            bail!("--memory-pressure: mapping {} MiB failed: {}", len >> 20, std::io::Error::last_os_error());
        }
        let b = Self { ptr, len };
        // Write one byte of every page: the kernel must give each a frame.
        let bytes = ptr.cast::<u8>();
        for off in (0..len).step_by(page) {
            // SAFETY: `off < len`, inside the mapping, which is writable.
            unsafe { bytes.add(off).write_volatile(1) };
        }
        let report = BalloonReport {
            share,
            mem_total_bytes: total,
            mem_available_before: avail,
            requested_bytes: requested,
            mapped_bytes: len as u64,
            held_bytes_start: b.resident(),
            capped,
        };
        Ok((b, report))
    }

    /// Bytes of the balloon resident in RAM now (`mincore`).
    pub fn resident(&self) -> u64 {
        let page = page_size();
        let mut vec = vec![0u8; self.len.div_ceil(page)];
        // SAFETY: the range is our mapping, page-aligned (mmap's address);
        // `vec` has one byte per page of it.
        let rc = unsafe { libc::mincore(self.ptr, self.len, vec.as_mut_ptr()) };
        if rc != 0 {
            return 0;
        }
        vec.iter().filter(|&&b| b & 1 == 1).count() as u64 * page as u64
    }
}

impl Drop for Balloon {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the mapping made in `inflate`.
        unsafe { libc::munmap(self.ptr, self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meminfo_fields_are_read_in_bytes() {
        let text = "MemTotal:       24576000 kB\nMemFree:  100 kB\nMemAvailable:   12288000 kB\n";
        assert_eq!(parse_meminfo(text), Some((24576000 * 1024, 12288000 * 1024)));
        assert_eq!(parse_meminfo("MemTotal: 5 kB\n"), None);
        let (total, avail) = meminfo().unwrap();
        assert!(total > 0 && avail <= total);
    }

    /// A tiny balloon (about 0.1% of RAM, capped at what is free): every
    /// page it mapped is resident after filling, and the measure says so.
    #[test]
    fn a_balloon_holds_what_it_reports() {
        let (total, _) = meminfo().unwrap();
        let share = ((8u64 << 20) as f64 / total as f64).min(0.5);
        let (b, r) = Balloon::inflate(share).unwrap();
        assert!(r.mapped_bytes > 0 && r.mapped_bytes <= r.requested_bytes.max(page_size() as u64));
        // Written pages are resident unless the kernel swapped them out at once.
        assert!(r.held_bytes_start >= r.mapped_bytes / 2, "{r:?}");
        assert!(b.resident() <= r.mapped_bytes);
        assert!(Balloon::inflate(0.0).is_err() && Balloon::inflate(1.0).is_err());
        assert!(cgroup_unavailable().is_some());
    }
}
