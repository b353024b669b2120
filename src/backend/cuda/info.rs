//! What `tfbench sysinfo` lists of each GPU: read from driver attributes,
//! and the PCIe link from Linux sysfs (the driver API has the bus address
//! but not the link; NVML is not loaded for one figure).

use super::{describe, driver};
use cudarc::driver::{CudaContext, sys};
use serde::Serialize;

/// One GPU as the driver describes it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct GpuInfo {
    /// `cuda:N`.
    pub device: String,
    /// Product name, e.g. "NVIDIA H100 80GB HBM3".
    pub name: String,
    /// The GPU's UUID (hex), which keys its probe cache.
    pub uuid: String,
    /// Compute capability, e.g. "9.0".
    pub compute_capability: String,
    /// Streaming multiprocessors.
    pub sms: i32,
    /// Device memory in bytes.
    pub memory_bytes: u64,
    /// Peak SM clock in MHz (the driver's attribute; `null` where the
    /// driver no longer reports it).
    pub sm_clock_mhz: Option<f64>,
    /// Peak memory clock in MHz.
    pub memory_clock_mhz: Option<f64>,
    /// Memory bus width in bits.
    pub memory_bus_bits: Option<i32>,
    /// L2 cache in bytes.
    pub l2_bytes: Option<i32>,
    /// PCI address, `domain:bus:device.0`.
    pub pci_address: String,
    /// PCIe link, e.g. "32.0 GT/s PCIe x16", from sysfs; `null` when unreadable.
    pub pcie_link: Option<String>,
}

/// The driver and its GPUs, or why there are none: what `sysinfo` shows.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct CudaInfo {
    /// Driver API version as "13.0", when there is a driver.
    pub driver_cuda_version: Option<String>,
    /// The CUDA version tfbench's bindings were built for.
    pub bindings_cuda_version: &'static str,
    /// NVRTC and cuBLAS: present, or what is missing.
    pub libraries: super::Libraries,
    /// Each GPU.
    pub gpus: Vec<GpuInfo>,
    /// Why no GPU is listed (no driver, no device, a failing call).
    pub unavailable: Option<String>,
}

/// The CUDA version a `cuDriverGetVersion` number stands for ("13.0").
pub fn version_string(v: i32) -> String {
    format!("{}.{}", v / 1000, (v % 1000) / 10)
}

/// The GPUs among `ordinals` that exist and answer, as a run's results
/// record them ([`crate::env::GpuEnvironment`]). A GPU that cannot be
/// described is left out: its cases were skipped with the reason.
pub fn environment(ordinals: &[u32]) -> Vec<crate::env::GpuEnvironment> {
    if ordinals.is_empty() {
        return Vec::new();
    }
    let Ok(d) = driver() else { return Vec::new() };
    // Only the GPUs the run uses: describing one opens its context.
    ordinals
        .iter()
        .filter(|&&n| (n as usize) < d.devices)
        .filter_map(|&n| one(n as usize).ok())
        .map(|g| crate::env::GpuEnvironment {
            device: g.device,
            name: g.name,
            uuid: g.uuid,
            compute_capability: g.compute_capability,
            memory_bytes: g.memory_bytes,
            driver_cuda_version: Some(version_string(d.version)),
            ..Default::default()
        })
        .collect()
}

/// Gathers [`CudaInfo`]; never fails (failures become `unavailable`).
pub fn gather() -> CudaInfo {
    let mut info = CudaInfo {
        driver_cuda_version: None,
        bindings_cuda_version: "13.0",
        libraries: super::libraries(),
        gpus: Vec::new(),
        unavailable: None,
    };
    match driver() {
        Err(why) => info.unavailable = Some(why),
        Ok(d) => {
            info.driver_cuda_version = Some(version_string(d.version));
            if d.devices == 0 {
                info.unavailable = Some("CUDA_ERROR_NO_DEVICE: the driver sees no GPU".into());
            }
            for n in 0..d.devices {
                match one(n) {
                    Ok(g) => info.gpus.push(g),
                    Err(why) => info.unavailable = Some(format!("cuda:{n}: {why}")),
                }
            }
        }
    }
    info
}

fn one(n: usize) -> Result<GpuInfo, String> {
    let ctx = CudaContext::new(n).map_err(|e| describe(&e))?;
    use sys::CUdevice_attribute as A;
    let attr = |a: A| ctx.attribute(a).ok();
    let (major, minor) = ctx.compute_capability().map_err(|e| describe(&e))?;
    let pci = (
        attr(A::CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID).unwrap_or(0),
        attr(A::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID).unwrap_or(0),
        attr(A::CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID).unwrap_or(0),
    );
    let pci_address = pci_address(pci);
    Ok(GpuInfo {
        device: format!("cuda:{n}"),
        name: ctx.name().map_err(|e| describe(&e))?,
        uuid: ctx
            .uuid()
            .map_err(|e| describe(&e))?
            .bytes
            .iter()
            .map(|b| format!("{:02x}", *b as u8))
            .collect(),
        compute_capability: format!("{major}.{minor}"),
        sms: attr(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT).unwrap_or(0),
        memory_bytes: ctx.total_mem().map_err(|e| describe(&e))? as u64,
        // The driver reports kHz; 0 means "not reported".
        sm_clock_mhz: attr(A::CU_DEVICE_ATTRIBUTE_CLOCK_RATE).filter(|&k| k > 0).map(|k| k as f64 / 1e3),
        memory_clock_mhz: attr(A::CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE)
            .filter(|&k| k > 0)
            .map(|k| k as f64 / 1e3),
        memory_bus_bits: attr(A::CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH),
        l2_bytes: attr(A::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE),
        pcie_link: pcie_link(std::path::Path::new("/sys/bus/pci/devices"), &pci_address),
        pci_address,
    })
}

/// The sysfs name of a PCI device from the driver's domain, bus and device
/// numbers (function 0).
pub fn pci_address((domain, bus, device): (i32, i32, i32)) -> String {
    format!("{domain:04x}:{bus:02x}:{device:02x}.0")
}

/// The current PCIe link of the device at `address` under `root` (sysfs
/// `current_link_speed` and `current_link_width`), with the maximum when it
/// differs (an idle GPU often trains down), e.g. "2.5 GT/s PCIe x16 (max
/// 32.0 GT/s PCIe x16)".
pub fn pcie_link(root: &std::path::Path, address: &str) -> Option<String> {
    let dir = root.join(address);
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).ok().map(|s| s.trim().to_string());
    let now = format!("{} x{}", read("current_link_speed")?, read("current_link_width")?);
    match (read("max_link_speed"), read("max_link_width")) {
        (Some(s), Some(w)) if format!("{s} x{w}") != now => Some(format!("{now} (max {s} x{w})")),
        _ => Some(now),
    }
}

/// `sysinfo`'s text lines for CUDA.
pub fn describe_lines(info: &CudaInfo) -> Vec<String> {
    let mut out = Vec::new();
    let libs = |r: &Result<(), String>| match r {
        Ok(()) => "found".to_string(),
        Err(why) => why.clone(),
    };
    out.push(format!(
        "CUDA: driver {}, bindings for CUDA {}; NVRTC {}; cuBLAS {}",
        info.driver_cuda_version.as_deref().map_or("none".into(), |v| format!("CUDA {v}")),
        info.bindings_cuda_version,
        libs(&info.libraries.nvrtc),
        libs(&info.libraries.cublas)
    ));
    for g in &info.gpus {
        let mhz = |m: Option<f64>| m.map_or("?".into(), |m| format!("{m:.0} MHz"));
        out.push(format!(
            "{}: {}, compute {}, {} SMs, {:.1} GiB, SM clock {}, memory clock {} x {} bit, L2 {} MiB, PCIe {} at {}",
            g.device,
            g.name,
            g.compute_capability,
            g.sms,
            g.memory_bytes as f64 / (1u64 << 30) as f64,
            mhz(g.sm_clock_mhz),
            mhz(g.memory_clock_mhz),
            g.memory_bus_bits.map_or("?".into(), |b| b.to_string()),
            g.l2_bytes.map_or("?".into(), |b| format!("{:.0}", b as f64 / (1 << 20) as f64)),
            g.pcie_link.as_deref().unwrap_or("link unknown"),
            g.pci_address,
        ));
    }
    if let Some(why) = &info.unavailable {
        out.push(format!("no GPU: {why}"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_and_pci_addresses_format_as_the_tools_print_them() {
        assert_eq!(version_string(13000), "13.0");
        assert_eq!(version_string(12080), "12.8");
        assert_eq!(pci_address((0, 0x1b, 0)), "0000:1b:00.0");
    }

    #[test]
    fn pcie_link_reads_sysfs_and_shows_a_trained_down_link() {
        let root = std::env::temp_dir().join(format!("tfbench-pcie-{}", std::process::id()));
        let dev = root.join("0000:1b:00.0");
        std::fs::create_dir_all(&dev).unwrap();
        for (f, v) in [
            ("current_link_speed", "2.5 GT/s PCIe\n"),
            ("current_link_width", "16\n"),
            ("max_link_speed", "32.0 GT/s PCIe\n"),
            ("max_link_width", "16\n"),
        ] {
            std::fs::write(dev.join(f), v).unwrap();
        }
        assert_eq!(
            pcie_link(&root, "0000:1b:00.0").as_deref(),
            Some("2.5 GT/s PCIe x16 (max 32.0 GT/s PCIe x16)")
        );
        std::fs::write(dev.join("current_link_speed"), "32.0 GT/s PCIe\n").unwrap();
        assert_eq!(pcie_link(&root, "0000:1b:00.0").as_deref(), Some("32.0 GT/s PCIe x16"));
        assert_eq!(pcie_link(&root, "0000:99:00.0"), None);
        std::fs::remove_dir_all(&root).unwrap();
    }

    /// On any machine: either GPUs are listed or the reason is, never both
    /// empty, and the text says which.
    #[test]
    fn gather_lists_gpus_or_says_why_not() {
        let info = gather();
        assert!(!info.gpus.is_empty() || info.unavailable.is_some(), "{info:?}");
        let lines = describe_lines(&info);
        assert!(lines[0].starts_with("CUDA: "), "{lines:?}");
        if info.gpus.is_empty() {
            assert!(lines.iter().any(|l| l.starts_with("no GPU: ")), "{lines:?}");
        }
        let json = serde_json::to_value(&info).unwrap();
        assert!(json.get("gpus").is_some() && json.get("unavailable").is_some(), "{json}");
    }
}
