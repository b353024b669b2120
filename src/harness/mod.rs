//! Timing: the counting allocator, the clock, the sampler, the runner, the
//! machine canaries and the slowdown-injection test hook.

pub mod canary;
pub mod inject;
pub mod load;
pub mod placement;
pub mod runner;
pub mod sampler;
pub mod screen;
pub mod timer;
