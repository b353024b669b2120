//! wasmi: the pure-Rust interpreter, in process.

use super::runtime::{Arg, Instance, Phases, Ret, WasmRuntime, check_range, pages_for};
use anyhow::{Context as _, Result, anyhow, bail};
use std::collections::HashMap;
use std::time::Instant;
use wasmi::{Engine, Func, Linker, Memory, Module, Store, Val};

/// A module instantiated in wasmi, with its store.
pub struct WasmiInstance {
    module: Module,
    store: Store<()>,
    memory: Memory,
    instance: wasmi::Instance,
    funcs: HashMap<String, (Func, usize)>,
    phases: Phases,
}

impl WasmiInstance {
    /// Validates, translates and instantiates `wasm` (imports none).
    pub fn load(wasm: &[u8]) -> Result<Self> {
        let mut config = wasmi::Config::default();
        config.wasm_simd(true);
        let engine = Engine::new(&config);
        let t = Instant::now();
        let module = Module::new(&engine, wasm).map_err(|e| anyhow!("wasmi refused the module: {e}"))?;
        let compile_ns = t.elapsed().as_nanos() as f64;
        let t = Instant::now();
        let (store, instance, memory) = Self::instantiate(&module)?;
        let instantiate_ns = t.elapsed().as_nanos() as f64;
        let phases = Phases { compile_ns, instantiate_ns };
        Ok(Self { module, store, memory, instance, funcs: HashMap::new(), phases })
    }

    fn instantiate(module: &Module) -> Result<(Store<()>, wasmi::Instance, Memory)> {
        let mut store = Store::new(module.engine(), ());
        let instance = Linker::<()>::new(module.engine())
            .instantiate_and_start(&mut store, module)
            .map_err(|e| anyhow!("wasmi could not instantiate the module: {e}"))?;
        let memory =
            instance.get_memory(&store, "memory").context("the module exports no memory named `memory`")?;
        Ok((store, instance, memory))
    }

    fn func(&mut self, name: &str) -> Result<(Func, usize)> {
        if let Some(f) = self.funcs.get(name) {
            return Ok(*f);
        }
        let f = self
            .instance
            .get_func(&self.store, name)
            .with_context(|| format!("the module exports no function `{name}`"))?;
        let results = f.ty(&self.store).results().len();
        self.funcs.insert(name.to_string(), (f, results));
        Ok((f, results))
    }
}

impl Instance for WasmiInstance {
    fn runtime(&self) -> WasmRuntime {
        WasmRuntime::Wasmi
    }
    fn phases(&self) -> Phases {
        self.phases
    }
    fn memory_bytes(&mut self) -> Result<usize> {
        Ok(self.memory.data(&self.store).len())
    }
    fn ensure_memory(&mut self, bytes: usize) -> Result<()> {
        let want = pages_for(bytes)?;
        let have = self.memory.size(&self.store);
        if want > have {
            self.memory
                .grow(&mut self.store, want - have)
                .map_err(|e| anyhow!("wasmi refused to grow memory from {have} to {want} pages: {e}"))?;
        }
        Ok(())
    }
    fn write(&mut self, offset: usize, data: &[u8]) -> Result<()> {
        let mem = self.memory.data_mut(&mut self.store);
        check_range(offset, data.len(), mem.len())?;
        mem[offset..offset + data.len()].copy_from_slice(data);
        Ok(())
    }
    fn read(&mut self, offset: usize, len: usize) -> Result<Vec<u8>> {
        let mem = self.memory.data(&self.store);
        check_range(offset, len, mem.len())?;
        Ok(mem[offset..offset + len].to_vec())
    }
    fn call(&mut self, name: &str, args: &[Arg], iters: u64) -> Result<Ret> {
        let (f, results) = self.func(name)?;
        let inputs: Vec<Val> = args
            .iter()
            .map(|a| match *a {
                Arg::I32(v) => Val::I32(v),
                Arg::F32(v) => Val::from(v),
            })
            .collect();
        let mut out = vec![Val::I32(0); results];
        if let Some(ty) = f.ty(&self.store).results().first() {
            out[0] = Val::default_for_ty(*ty);
        }
        for _ in 0..iters.max(1) {
            f.call(&mut self.store, &inputs, &mut out)
                .map_err(|e| anyhow!("wasmi: `{name}` trapped: {e}"))?;
        }
        Ok(match out.first() {
            None => Ret::None,
            Some(Val::I32(v)) => Ret::I32(*v),
            Some(Val::F32(v)) => Ret::F32(v.to_float()),
            Some(other) => bail!("`{name}` returned {other:?}, not an i32 or f32"),
        })
    }
    fn reset(&mut self) -> Result<()> {
        (self.store, self.instance, self.memory) = Self::instantiate(&self.module)?;
        self.funcs.clear();
        Ok(())
    }
    fn copy_loop(&mut self, offset: usize, data: &[u8], into: bool, iters: u64) -> Result<()> {
        let mem = self.memory.data_mut(&mut self.store);
        check_range(offset, data.len(), mem.len())?;
        let region = &mut mem[offset..offset + data.len()];
        let mut out = vec![0u8; if into { 0 } else { data.len() }];
        for _ in 0..iters.max(1) {
            if into {
                region.copy_from_slice(std::hint::black_box(data));
            } else {
                out.copy_from_slice(region);
                std::hint::black_box(&mut out);
            }
        }
        Ok(())
    }
}
