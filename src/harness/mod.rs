//! Timing: the counting allocator, the clock, the sampler and the runner.

pub mod alloc;
pub mod runner;
pub mod sampler;
pub mod timer;
