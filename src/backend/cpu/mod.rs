//! The CPU backend: always available; its execution context
//! ([`Context`]) owns the CPU's threads, and its roof is the machine probe
//! (`crate::probe`), which `run` and `sysinfo` take themselves.

mod context;

pub use context::{
    Context, Threads, configure_run_pool, current_threads, install, on_pool, on_pool_of, run_threads,
};

use super::{Backend, Device, DeviceKind};

/// The host CPU.
pub struct CpuBackend;

impl Backend for CpuBackend {
    fn kind(&self) -> DeviceKind {
        DeviceKind::Cpu
    }
    fn availability(&self, _device: Device) -> Result<(), String> {
        Ok(())
    }
}
