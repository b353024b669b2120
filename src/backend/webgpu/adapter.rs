//! wgpu's instance, the adapters in `webgpu:N` order, and one device per
//! adapter, made once and shared by every case on it.

use super::AdapterInfo;
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll, Wake, Waker};

/// Runs `fut` to completion on this thread. wgpu's native futures are
/// ready at once or after a device poll (which the callers do); this parks
/// the thread between polls instead of pulling in an executor.
pub(super) fn block_on<F: Future>(fut: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut fut = std::pin::pin!(fut);
    loop {
        match fut.as_mut().poll(&mut cx) {
            Poll::Ready(v) => return v,
            Poll::Pending => std::thread::park(),
        }
    }
}

/// One adapter wgpu lists, with what tfbench shows of it.
struct Entry {
    info: AdapterInfo,
    adapter: wgpu::Adapter,
}

/// Listing order: real GPUs first, CPU-emulated last (stable within a kind).
fn rank(t: wgpu::DeviceType) -> u8 {
    match t {
        wgpu::DeviceType::DiscreteGpu => 0,
        wgpu::DeviceType::IntegratedGpu => 1,
        wgpu::DeviceType::VirtualGpu => 2,
        wgpu::DeviceType::Other => 3,
        wgpu::DeviceType::Cpu => 4,
    }
}

fn type_name(t: wgpu::DeviceType) -> &'static str {
    match t {
        wgpu::DeviceType::DiscreteGpu => "discrete GPU",
        wgpu::DeviceType::IntegratedGpu => "integrated GPU",
        wgpu::DeviceType::VirtualGpu => "virtual GPU",
        wgpu::DeviceType::Cpu => "CPU-emulated",
        wgpu::DeviceType::Other => "other",
    }
}

fn api_name(b: wgpu::Backend) -> &'static str {
    match b {
        wgpu::Backend::Vulkan => "Vulkan",
        wgpu::Backend::Metal => "Metal",
        wgpu::Backend::Dx12 => "Direct3D 12",
        wgpu::Backend::Gl => "OpenGL",
        other => other.to_str(),
    }
}

/// Every adapter with compute shaders, listed once per process (creating
/// a Vulkan instance loads the drivers: milliseconds, not per case).
fn entries() -> &'static [Entry] {
    static LIST: OnceLock<(wgpu::Instance, Vec<Entry>)> = OnceLock::new();
    let (_, entries) = LIST.get_or_init(|| {
        let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
        desc.backends = wgpu::Backends::all();
        let instance = wgpu::Instance::new(desc);
        let mut adapters: Vec<wgpu::Adapter> = block_on(instance.enumerate_adapters(wgpu::Backends::all()))
            .into_iter()
            .filter(|a| a.get_downlevel_capabilities().flags.contains(wgpu::DownlevelFlags::COMPUTE_SHADERS))
            .collect();
        adapters.sort_by_key(|a| rank(a.get_info().device_type));
        let entries = adapters
            .into_iter()
            .enumerate()
            .map(|(i, adapter)| {
                let g = adapter.get_info();
                let driver = [g.driver.trim(), g.driver_info.trim()]
                    .into_iter()
                    .filter(|s| !s.is_empty())
                    .collect::<Vec<_>>()
                    .join(" ");
                let info = AdapterInfo {
                    index: i as u32,
                    name: g.name.clone(),
                    backend: api_name(g.backend).to_string(),
                    device_type: type_name(g.device_type).to_string(),
                    driver,
                    emulated: g.device_type == wgpu::DeviceType::Cpu,
                };
                Entry { info, adapter }
            })
            .collect();
        (instance, entries)
    });
    entries
}

/// The adapters, in `webgpu:N` order (never `Err` in this build: a machine
/// without a driver lists none).
pub(super) fn adapter_infos() -> Result<Vec<AdapterInfo>, String> {
    Ok(entries().iter().map(|e| e.info.clone()).collect())
}

/// Errors the device reported outside an error scope (a failed dispatch,
/// a lost device), kept until a [`Gpu`]'s user reads them: wgpu's default
/// is to panic on them.
type Sink = Arc<Mutex<Vec<String>>>;

/// An adapter's device and queue, shared by every case on it.
#[derive(Clone)]
pub(super) struct Gpu {
    /// The logical device.
    pub device: wgpu::Device,
    /// Its queue.
    pub queue: wgpu::Queue,
    /// What it is.
    pub info: AdapterInfo,
    errors: Sink,
}

impl Gpu {
    /// The errors reported since the last call, as one message (`Ok` when
    /// none).
    pub fn take_errors(&self) -> Result<(), String> {
        let mut errors = self.errors.lock().unwrap_or_else(|p| p.into_inner());
        if errors.is_empty() {
            return Ok(());
        }
        let all = errors.join("; ");
        errors.clear();
        Err(all)
    }
}

/// The device of adapter `n`, made on first use; `Err` is why not (the
/// skip reason from [`super::adapter`], or the adapter's refusal).
pub(super) fn gpu(n: u32) -> Result<Gpu, String> {
    static DEVICES: OnceLock<Mutex<HashMap<u32, Gpu>>> = OnceLock::new();
    let info = super::adapter(n)?;
    let mut devices = DEVICES.get_or_init(Default::default).lock().unwrap_or_else(|p| p.into_inner());
    if let Some(g) = devices.get(&n) {
        return Ok(g.clone());
    }
    let adapter = &entries()[n as usize].adapter;
    // WebGPU's default limits (what a browser grants: 256 invocations and
    // 16 KiB of workgroup memory; the kernels fit them), with the buffer
    // sizes the adapter allows, so large cases are refused by the adapter.
    let have = adapter.limits();
    let limits = wgpu::Limits {
        max_buffer_size: have.max_buffer_size,
        max_storage_buffer_binding_size: have.max_storage_buffer_binding_size,
        ..wgpu::Limits::default()
    };
    let desc =
        wgpu::DeviceDescriptor { label: Some("tfbench"), required_limits: limits, ..Default::default() };
    let (device, queue) = block_on(adapter.request_device(&desc))
        .map_err(|e| format!("webgpu:{n}: {} refused a device: {e}", info.name))?;
    let errors: Sink = Arc::default();
    let sink = errors.clone();
    device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
        sink.lock().unwrap_or_else(|p| p.into_inner()).push(e.to_string());
    }));
    let g = Gpu { device, queue, info, errors };
    devices.insert(n, g.clone());
    Ok(g)
}
