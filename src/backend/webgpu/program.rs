//! A kernel on an adapter: compiled, its buffers uploaded once, dispatched
//! and waited for, its output read back.

use super::adapter::{Gpu, block_on, gpu};
use super::{AdapterInfo, Op, Phases};
use anyhow::{Result, anyhow, bail};
use std::time::{Duration, Instant};

/// The shortest wait for the device that counts as a hang.
pub const HANG_GUARD: Duration = Duration::from_secs(30);

/// A kernel ready to dispatch on a WebGPU adapter (see [`Program::load`]).
pub struct Program {
    gpu: Gpu,
    op: Op,
    pipeline: wgpu::ComputePipeline,
    bind_group: wgpu::BindGroup,
    output: wgpu::Buffer,
    staging: wgpu::Buffer,
    phases: Phases,
    limit: Option<Duration>,
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn u32_bytes(v: &[u32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

impl Program {
    /// Compiles `op`'s kernel on adapter `adapter` and uploads `inputs` (one
    /// slice per input buffer, [`Op::inputs`] floats each), timing both
    /// ([`Program::phases`]). An unavailable adapter, a buffer past the
    /// adapter's limits, a kernel that does not validate or an upload the
    /// device refuses is an error naming the device, never a panic.
    pub fn load(adapter: u32, op: Op, inputs: &[&[f32]]) -> Result<Program> {
        Self::load_source(adapter, op, op.source(), inputs)
    }

    /// [`Program::load`] with `source` as the kernel's WGSL (its bindings
    /// and grid still `op`'s): the tests' way to hand it a broken kernel.
    pub(super) fn load_source(adapter: u32, op: Op, source: &str, inputs: &[&[f32]]) -> Result<Program> {
        let want = op.inputs();
        let got: Vec<usize> = inputs.iter().map(|i| i.len()).collect();
        if got != want {
            bail!("webgpu:{adapter}: {} takes inputs of {want:?} floats, got {got:?}", op.name());
        }
        let gpu = gpu(adapter).map_err(|why| anyhow!(why))?;
        let device = &gpu.device;
        let most = gpu.device.limits().max_storage_buffer_binding_size as usize;
        if let Some(big) = want.iter().chain([&op.output_len()]).find(|&&f| 4 * f > most) {
            bail!(
                "webgpu:{adapter}: a buffer of {} bytes exceeds {}'s largest storage binding ({most} bytes)",
                4 * big,
                gpu.info.name
            );
        }

        let t = Instant::now();
        let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some(op.name()),
            source: wgpu::ShaderSource::Wgsl(source.into()),
        });
        let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(op.name()),
            layout: None,
            module: &module,
            entry_point: Some("main"),
            compilation_options: Default::default(),
            cache: None,
        });
        if let Some(e) = block_on(scope.pop()) {
            bail!("webgpu:{adapter}: the {} kernel does not compile: {e}", op.name());
        }
        let compile_ns = t.elapsed().as_nanos() as f64;

        let t = Instant::now();
        let oom = device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
        let storage = |label: &str, bytes: usize, usage: wgpu::BufferUsages| {
            device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(label),
                size: bytes as u64,
                usage,
                mapped_at_creation: false,
            })
        };
        let mut buffers = Vec::new();
        for (i, data) in inputs.iter().enumerate() {
            let b = storage(
                &format!("input{i}"),
                4 * data.len(),
                wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
            );
            gpu.queue.write_buffer(&b, 0, &f32_bytes(data));
            buffers.push(b);
        }
        let out_bytes = 4 * op.output_len();
        let output = storage("output", out_bytes, wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC);
        let staging =
            storage("staging", out_bytes, wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST);
        let uniform = op.uniform().map(|words| {
            let b =
                storage("shape", 4 * words.len(), wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST);
            gpu.queue.write_buffer(&b, 0, &u32_bytes(&words));
            b
        });
        let layout = pipeline.get_bind_group_layout(0);
        let entries: Vec<wgpu::BindGroupEntry> = buffers
            .iter()
            .chain([&output])
            .chain(uniform.as_ref())
            .enumerate()
            .map(|(i, b)| wgpu::BindGroupEntry { binding: i as u32, resource: b.as_entire_binding() })
            .collect();
        let bind_group = device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some(op.name()),
            layout: &layout,
            entries: &entries,
        });
        let index = gpu.queue.submit([]);
        let errors = [block_on(scope.pop()), block_on(oom.pop())];
        if let Some(e) = errors.into_iter().flatten().next() {
            bail!("webgpu:{adapter}: uploading {}'s buffers failed: {e}", op.name());
        }
        let mut p = Program {
            gpu: gpu.clone(),
            op,
            pipeline,
            bind_group,
            output,
            staging,
            phases: Phases { compile_ns, upload_ns: 0.0 },
            limit: None,
        };
        p.wait(index)?;
        p.phases.upload_ns = t.elapsed().as_nanos() as f64;
        Ok(p)
    }

    /// Waits until submission `index` has finished on the device (at most
    /// the time limit), then reports any error the device raised meanwhile.
    fn wait(&self, index: wgpu::SubmissionIndex) -> Result<()> {
        let poll = wgpu::PollType::Wait { submission_index: Some(index), timeout: self.limit };
        self.gpu.device.poll(poll).map_err(|e| {
            anyhow!(
                "webgpu:{}: waiting for {} on {}: {e}",
                self.gpu.info.index,
                self.op.name(),
                self.gpu.info.name
            )
        })?;
        self.gpu.take_errors().map_err(|e| anyhow!("webgpu:{}: {}: {e}", self.gpu.info.index, self.op.name()))
    }

    /// Dispatches the kernel `iters` times, each a command buffer of its own
    /// submitted and waited for before the next (the time of a dispatch is
    /// the device's, with its submission).
    pub fn dispatch(&mut self, iters: u64) -> Result<()> {
        let (x, y, z) = self.op.workgroups();
        for _ in 0..iters {
            let mut encoder =
                self.gpu.device.create_command_encoder(&wgpu::CommandEncoderDescriptor::default());
            {
                let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor::default());
                pass.set_pipeline(&self.pipeline);
                pass.set_bind_group(0, &self.bind_group, &[]);
                pass.dispatch_workgroups(x, y, z);
            }
            let index = self.gpu.queue.submit([encoder.finish()]);
            self.wait(index)?;
        }
        Ok(())
    }

    /// The output buffer's floats, copied back to the host.
    pub fn read_output(&mut self) -> Result<Vec<f32>> {
        let bytes = self.output.size();
        let mut encoder = self.gpu.device.create_command_encoder(&wgpu::CommandEncoderDescriptor::default());
        encoder.copy_buffer_to_buffer(&self.output, 0, &self.staging, 0, bytes);
        let index = self.gpu.queue.submit([encoder.finish()]);
        self.wait(index)?;
        let slice = self.staging.slice(..);
        let (tx, rx) = std::sync::mpsc::channel();
        slice.map_async(wgpu::MapMode::Read, move |r| {
            let _ = tx.send(r);
        });
        let poll = wgpu::PollType::Wait { submission_index: None, timeout: self.limit };
        self.gpu
            .device
            .poll(poll)
            .map_err(|e| anyhow!("webgpu:{}: reading the output: {e}", self.gpu.info.index))?;
        // The callback runs in whichever thread's poll resolved the mapping:
        // another thread sharing the device may be about to run it.
        match rx.recv_timeout(self.limit.unwrap_or(Duration::from_secs(60))) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => bail!("webgpu:{}: mapping the output failed: {e}", self.gpu.info.index),
            Err(_) => {
                bail!("webgpu:{}: the output was not mapped after the device went idle", self.gpu.info.index)
            }
        }
        let out = slice
            .get_mapped_range()
            .map(|view| view.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect());
        // Unmapped either way, so the next read can map it again.
        self.staging.unmap();
        out.map_err(|e| anyhow!("webgpu:{}: reading the mapped output: {e}", self.gpu.info.index))
    }

    /// How long compiling and uploading took.
    pub fn phases(&self) -> Phases {
        self.phases
    }

    /// The adapter it runs on.
    pub fn adapter(&self) -> &AdapterInfo {
        &self.gpu.info
    }

    /// The case's time budget, as a guard against a hung device: one wait
    /// longer than the budget, or than [`HANG_GUARD`] where the budget is
    /// shorter, is an error naming the kernel and the adapter. Not the
    /// budget alone: a dispatch that legitimately takes longer than a
    /// `--quick` budget (512^3 GEMM on lavapipe) is slow, not hung, and
    /// runs to its end as a CPU case's iteration does.
    pub fn set_time_limit(&mut self, limit: Duration) {
        self.limit = Some(limit.max(HANG_GUARD));
    }
}
