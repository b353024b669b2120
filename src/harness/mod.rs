//! Timing: the counting allocator, the clock, the sampler, the runner, the
//! machine canaries and the slowdown-injection test hook.

pub mod alloc;
pub mod canary;
pub mod inject;
pub mod runner;
pub mod sampler;
pub mod timer;
