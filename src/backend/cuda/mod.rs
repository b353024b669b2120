//! The CUDA runtime layer: the one place that talks to the NVIDIA driver,
//! NVRTC and cuBLAS (through `cudarc`, loaded at run time).
//!
//! - detection: [`driver`] (is libcuda there, how many GPUs),
//!   [`availability`] (the skip reason of a `cuda:N` case), [`libraries`];
//! - [`Gpu`]: one context and one stream per device, cached for the
//!   process ([`gpu`]), with the NVRTC module cache ([`Gpu::module`]), cuBLAS
//!   handles ([`Gpu::blas`]) and timing events;
//! - [`info`]: what `sysinfo` lists of each GPU; [`probe`]: its measured
//!   limits, cached per GPU;
//! - [`workload`]: the harness side of a GPU case (stream sync before every
//!   clock read, CUDA-event time, setup cost, device bytes);
//! - `tensor/`: the tensor work of [`crate::backend::ops`] realised on a
//!   GPU ([`CudaBackend`]'s [`crate::backend::ops::TensorOps`]): the tensor
//!   suite's GPU cases, on its inputs and checks.
//!
//! cudarc is built with `dynamic-loading`: nothing CUDA is needed to build,
//! and the libraries are opened on first use. Its loaders *panic* when a
//! library is missing, so every entry point here first asks whether the
//! library can be opened (`is_culib_present`) and turns absence into an
//! error string; panics are never caught as the design. Kernel sources and
//! the cuBLAS call wrappers are numeric kernels: they live in
//! `crate::backend::cuda::kernels`.

pub mod info;
pub mod kernels;
pub mod probe;
mod tensor;
pub mod workload;

use cudarc::driver::{CudaContext, CudaEvent, CudaModule, CudaStream, DriverError, sys};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

pub use cudarc;

/// Describes a driver error by its name and text, e.g.
/// `CUDA_ERROR_NO_DEVICE (no CUDA-capable device is detected)`.
pub fn describe(e: &DriverError) -> String {
    let name =
        e.error_name().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|_| format!("{:?}", e.0));
    match e.error_string() {
        Ok(s) => format!("{name} ({})", s.to_string_lossy()),
        Err(_) => name,
    }
}

/// The CUDA driver on this machine: its version and the number of GPUs,
/// or why there is none. Asked once per process (cuInit is not free).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Driver {
    /// `cuDriverGetVersion`, e.g. 13000 for CUDA 13.0.
    pub version: i32,
    /// GPUs the driver sees.
    pub devices: usize,
}

/// The driver, or why it cannot be used ("no CUDA driver: libcuda.so not
/// found", "cuInit failed: CUDA_ERROR_NO_DEVICE (...)"). Never panics.
pub fn driver() -> Result<Driver, String> {
    static DRIVER: OnceLock<Result<Driver, String>> = OnceLock::new();
    DRIVER.get_or_init(open_driver).clone()
}

fn open_driver() -> Result<Driver, String> {
    // SAFETY: only tries to dlopen the library names cudarc knows; without
    // this check the first driver call panics inside cudarc's loader.
    if !unsafe { sys::is_culib_present() } {
        return Err("no CUDA driver: libcuda.so not found".into());
    }
    cudarc::driver::result::init().map_err(|e| format!("CUDA driver: cuInit failed: {}", describe(&e)))?;
    let mut version = 0i32;
    // SAFETY: the library is present (checked above) and cuInit succeeded.
    let r = unsafe { sys::cuDriverGetVersion(&mut version) };
    r.result().map_err(|e| format!("CUDA driver: cuDriverGetVersion failed: {}", describe(&e)))?;
    let devices = CudaContext::device_count()
        .map_err(|e| format!("CUDA driver: cuDeviceGetCount failed: {}", describe(&e)))?;
    Ok(Driver { version, devices: devices.max(0) as usize })
}

/// Whether `cuda:n` can run cases here: `Err` is the skip reason, naming
/// the device ("cuda:3 does not exist: 1 GPU (cuda:0)").
pub fn availability(n: u32) -> Result<(), String> {
    let d = driver().map_err(|why| format!("cuda:{n}: {why}"))?;
    match d.devices {
        0 => Err(format!("cuda:{n}: CUDA_ERROR_NO_DEVICE: the driver sees no GPU")),
        count if n as usize >= count => Err(format!(
            "cuda:{n} does not exist: {count} GPU{} (cuda:0{})",
            if count == 1 { "" } else { "s" },
            if count == 1 { String::new() } else { format!("..cuda:{}", count - 1) }
        )),
        _ => Ok(()),
    }
}

/// The CUDA libraries besides the driver that GPU cases need, each `Ok`
/// when it can be opened or `Err` with what is missing.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Libraries {
    /// NVRTC (runtime compilation of tfbench's own kernels).
    #[serde(serialize_with = "found_or_why")]
    pub nvrtc: Result<(), String>,
    /// cuBLAS (GEMMs).
    #[serde(serialize_with = "found_or_why")]
    pub cublas: Result<(), String>,
}

/// A library's state in JSON: `"found"` or what is missing.
fn found_or_why<S: serde::Serializer>(r: &Result<(), String>, s: S) -> Result<S::Ok, S::Error> {
    match r {
        Ok(()) => s.serialize_str("found"),
        Err(why) => s.serialize_str(why),
    }
}

/// Which of NVRTC and cuBLAS can be opened (the names follow the CUDA major
/// version tfbench's bindings were built for, e.g. `libcublas.so.13`).
pub fn libraries() -> Libraries {
    // SAFETY: these only try to dlopen the candidate library names.
    let nvrtc = unsafe { cudarc::nvrtc::sys::is_culib_present() };
    let cublas = unsafe { cudarc::cublas::sys::is_culib_present() };
    let why =
        |ok: bool, name: &str| if ok { Ok(()) } else { Err(format!("{name} not found on the loader path")) };
    Libraries { nvrtc: why(nvrtc, "libnvrtc.so"), cublas: why(cublas, "libcublas.so") }
}

/// One GPU as the suites use it: its context and the stream every case
/// on it runs on, plus the compiled-module cache.
pub struct Gpu {
    /// The device number (`cuda:N`).
    pub ordinal: u32,
    /// The device's primary context.
    pub ctx: Arc<CudaContext>,
    /// The stream all work of this process on this GPU goes to.
    pub stream: Arc<CudaStream>,
    /// Compute capability `(major, minor)`.
    pub capability: (i32, i32),
    modules: Mutex<BTreeMap<&'static str, Arc<CudaModule>>>,
}

/// The cached [`Gpu`] for `cuda:n` (created on first use), or why there is
/// none (the reason of [`availability`], or the failing call).
pub fn gpu(n: u32) -> Result<Arc<Gpu>, String> {
    static GPUS: OnceLock<Mutex<BTreeMap<u32, Arc<Gpu>>>> = OnceLock::new();
    availability(n)?;
    let mut map = GPUS.get_or_init(Default::default).lock().map_err(|_| "GPU cache poisoned".to_string())?;
    if let Some(g) = map.get(&n) {
        return Ok(g.clone());
    }
    let ctx = CudaContext::new(n as usize).map_err(|e| format!("cuda:{n}: context: {}", describe(&e)))?;
    // One stream per device and explicit synchronisation: cudarc's per-buffer
    // event tracking (for several streams) would add event records to every
    // launch, which the launch-latency cases would then time.
    // SAFETY: every buffer of a case is used on this one stream only.
    unsafe { ctx.disable_event_tracking() };
    let stream = ctx.new_stream().map_err(|e| format!("cuda:{n}: stream: {}", describe(&e)))?;
    let capability =
        ctx.compute_capability().map_err(|e| format!("cuda:{n}: compute capability: {}", describe(&e)))?;
    let g = Arc::new(Gpu { ordinal: n, ctx, stream, capability, modules: Mutex::new(BTreeMap::new()) });
    map.insert(n, g.clone());
    Ok(g)
}

/// The NVRTC virtual architecture for compute capability `cc`: the newest
/// one NVRTC 13 knows that is not newer than the device (PTX is JIT-compiled
/// forward, never backward). `None` below compute_75, which CUDA 13 dropped.
pub fn nvrtc_arch(cc: (i32, i32)) -> Option<&'static str> {
    const ARCHS: &[((i32, i32), &str)] = &[
        ((7, 5), "compute_75"),
        ((8, 0), "compute_80"),
        ((8, 6), "compute_86"),
        ((8, 7), "compute_87"),
        ((8, 9), "compute_89"),
        ((9, 0), "compute_90"),
        ((10, 0), "compute_100"),
        ((12, 0), "compute_120"),
    ];
    ARCHS.iter().rev().find(|(v, _)| *v <= cc).map(|(_, a)| *a)
}

impl Gpu {
    /// The module compiled from `src` (NVRTC, for this GPU's architecture),
    /// cached under `name` for the process, and the time compiling and
    /// loading took now (zero when it was cached): the case's setup cost.
    pub fn module(
        &self,
        name: &'static str,
        src: &'static str,
    ) -> anyhow::Result<(Arc<CudaModule>, Duration)> {
        let mut cache = self.modules.lock().map_err(|_| anyhow::anyhow!("module cache poisoned"))?;
        if let Some(m) = cache.get(name) {
            return Ok((m.clone(), Duration::ZERO));
        }
        libraries().nvrtc.map_err(|why| crate::workload::skip(format!("cuda:{}: {why}", self.ordinal)))?;
        let t = Instant::now();
        let opts = cudarc::nvrtc::CompileOptions {
            arch: nvrtc_arch(self.capability),
            name: Some(format!("{name}.cu")),
            ..Default::default()
        };
        let ptx = cudarc::nvrtc::compile_ptx_with_opts(src, opts).map_err(|e| match e {
            // The compiler's own log, readable (the error's Debug form escapes it).
            cudarc::nvrtc::CompileError::CompileError { nvrtc, log, .. } => {
                anyhow::anyhow!("NVRTC compiling {name}: {nvrtc:?}:\n{}", log.to_string_lossy())
            }
            other => anyhow::anyhow!("NVRTC compiling {name}: {other}"),
        })?;
        let m = self.ctx.load_module(ptx).map_err(|e| anyhow::anyhow!("loading {name}: {}", describe(&e)))?;
        cache.insert(name, m.clone());
        Ok((m, t.elapsed()))
    }

    /// A new cuBLAS handle on this GPU's stream (a case's own, created in
    /// prepare), or a skip when libcublas is missing.
    pub fn blas(&self) -> anyhow::Result<cudarc::cublas::CudaBlas> {
        libraries().cublas.map_err(|why| crate::workload::skip(format!("cuda:{}: {why}", self.ordinal)))?;
        cudarc::cublas::CudaBlas::new(self.stream.clone()).map_err(|e| anyhow::anyhow!("cublasCreate: {e}"))
    }

    /// A CUDA event that records timing (created once per case).
    pub fn timing_event(&self) -> anyhow::Result<CudaEvent> {
        self.ctx.new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT)).map_err(|e| self.err("event", e))
    }

    /// Waits for all work queued on the stream.
    pub fn sync(&self) -> anyhow::Result<()> {
        self.stream.synchronize().map_err(|e| self.err("stream synchronize", e))
    }

    /// `(free, total)` device memory in bytes.
    pub fn memory(&self) -> anyhow::Result<(usize, usize)> {
        self.ctx.mem_get_info().map_err(|e| self.err("cuMemGetInfo", e))
    }

    /// A driver error as an `anyhow` error naming the GPU and the call.
    pub fn err(&self, what: &str, e: DriverError) -> anyhow::Error {
        anyhow::anyhow!("cuda:{}: {what}: {}", self.ordinal, describe(&e))
    }
}

/// NVIDIA GPUs through CUDA: the [`super::Backend`] of `cuda:N` devices.
pub struct CudaBackend;

impl super::Backend for CudaBackend {
    fn kind(&self) -> super::DeviceKind {
        super::DeviceKind::Cuda
    }

    fn availability(&self, device: super::Device) -> Result<(), String> {
        match device {
            super::Device::Cuda(n) => availability(n),
            other => Err(format!("{other} is not a CUDA device")),
        }
    }

    fn environment(&self, devices: &[super::Device]) -> Vec<crate::env::GpuEnvironment> {
        let ordinals: Vec<u32> = devices
            .iter()
            .filter_map(|d| match d {
                super::Device::Cuda(n) => Some(*n),
                _ => None,
            })
            .collect();
        info::environment(&ordinals)
    }

    fn describe(&self) -> Option<(Vec<String>, serde_json::Value)> {
        let cuda = info::gather();
        let limits: Vec<(String, probe::GpuLimits)> =
            cuda.gpus.iter().filter_map(|g| Some((g.device.clone(), probe::load(&g.uuid)?))).collect();
        let mut lines = info::describe_lines(&cuda);
        lines.extend(limits.iter().map(|(d, l)| probe::describe(d, l)));
        let json = serde_json::json!({
            "cuda": cuda,
            "cuda_limits": limits.into_iter().map(|(_, l)| l).collect::<Vec<_>>(),
        });
        Some((lines, json))
    }

    fn tensor_ops(&self) -> Option<&dyn super::ops::TensorOps> {
        Some(self)
    }

    fn probe(&self) -> anyhow::Result<()> {
        for g in &info::gather().gpus {
            let n: u32 = g.device.trim_start_matches("cuda:").parse().unwrap_or(0);
            eprintln!("probing {} ({}): cuBLAS GEMM per dtype, copies, launch latency ...", g.device, g.name);
            let gpu = gpu(n).map_err(|why| anyhow::anyhow!(why))?;
            let gl = probe::measure(&gpu)?;
            eprintln!("cached in {}", probe::save(&gl)?.display());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nvrtc_arch_is_the_newest_not_above_the_device() {
        assert_eq!(nvrtc_arch((9, 0)), Some("compute_90"));
        assert_eq!(nvrtc_arch((8, 9)), Some("compute_89"));
        assert_eq!(nvrtc_arch((8, 8)), Some("compute_87"));
        assert_eq!(nvrtc_arch((10, 3)), Some("compute_100"));
        assert_eq!(nvrtc_arch((12, 1)), Some("compute_120"));
        assert_eq!(nvrtc_arch((7, 0)), None);
    }

    /// What this machine has decides what must happen: without a driver
    /// every GPU is unavailable with a reason naming it, and `gpu` says the
    /// same instead of panicking; with one, a GPU past the last is named.
    #[test]
    fn detection_never_panics_and_names_the_device() {
        match driver() {
            Err(why) => {
                eprintln!("no CUDA here: {why}");
                assert!(why.contains("libcuda") || why.contains("cuInit"), "{why}");
                for n in [0, 7] {
                    let a = availability(n).unwrap_err();
                    assert!(a.starts_with(&format!("cuda:{n}: ")) && a.contains(&why), "{a}");
                    assert_eq!(gpu(n).err(), Some(a));
                }
            }
            Ok(d) => {
                let past = d.devices as u32;
                let a = availability(past).unwrap_err();
                assert!(a.contains(&format!("cuda:{past}")), "{a}");
                if d.devices > 0 {
                    assert!(a.contains("does not exist"), "{a}");
                    assert!(availability(0).is_ok());
                }
            }
        }
    }
}
