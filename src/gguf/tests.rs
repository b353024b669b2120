//! The reader on hand-written files: a valid one, each kind of bad input,
//! and seeded random mutations and truncations that must never panic.

use super::*;

/// A little GGUF writer for tests: metadata as (key, type, payload bytes).
pub(crate) struct Writer {
    kv: Vec<u8>,
    n_kv: u64,
    tensors: Vec<(String, Vec<u64>, u32, Vec<u8>)>,
    pub version: u32,
}

fn string(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

impl Writer {
    pub fn new() -> Self {
        Self { kv: Vec::new(), n_kv: 0, tensors: Vec::new(), version: 3 }
    }
    pub fn kv_str(&mut self, key: &str, v: &str) -> &mut Self {
        string(&mut self.kv, key);
        self.kv.extend_from_slice(&8u32.to_le_bytes());
        string(&mut self.kv, v);
        self.n_kv += 1;
        self
    }
    pub fn kv_u32(&mut self, key: &str, v: u32) -> &mut Self {
        string(&mut self.kv, key);
        self.kv.extend_from_slice(&4u32.to_le_bytes());
        self.kv.extend_from_slice(&v.to_le_bytes());
        self.n_kv += 1;
        self
    }
    pub fn kv_f32(&mut self, key: &str, v: f32) -> &mut Self {
        string(&mut self.kv, key);
        self.kv.extend_from_slice(&6u32.to_le_bytes());
        self.kv.extend_from_slice(&v.to_le_bytes());
        self.n_kv += 1;
        self
    }
    pub fn kv_strs(&mut self, key: &str, v: &[&str]) -> &mut Self {
        string(&mut self.kv, key);
        self.kv.extend_from_slice(&9u32.to_le_bytes());
        self.kv.extend_from_slice(&8u32.to_le_bytes());
        self.kv.extend_from_slice(&(v.len() as u64).to_le_bytes());
        for s in v {
            string(&mut self.kv, s);
        }
        self.n_kv += 1;
        self
    }
    pub fn tensor(&mut self, name: &str, dims: &[u64], ty: u32, data: Vec<u8>) -> &mut Self {
        self.tensors.push((name.into(), dims.to_vec(), ty, data));
        self
    }
    pub fn bytes(&self) -> Vec<u8> {
        let mut out = b"GGUF".to_vec();
        out.extend_from_slice(&self.version.to_le_bytes());
        out.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        out.extend_from_slice(&self.n_kv.to_le_bytes());
        out.extend_from_slice(&self.kv);
        let mut off = 0u64;
        for (name, dims, ty, data) in &self.tensors {
            string(&mut out, name);
            out.extend_from_slice(&(dims.len() as u32).to_le_bytes());
            dims.iter().for_each(|d| out.extend_from_slice(&d.to_le_bytes()));
            out.extend_from_slice(&ty.to_le_bytes());
            out.extend_from_slice(&off.to_le_bytes());
            off = (off + data.len() as u64).next_multiple_of(DEFAULT_ALIGNMENT);
        }
        out.resize(out.len().next_multiple_of(DEFAULT_ALIGNMENT as usize), 0);
        for (_, _, _, data) in &self.tensors {
            out.extend_from_slice(data);
            out.resize(out.len().next_multiple_of(DEFAULT_ALIGNMENT as usize), 0);
        }
        out
    }
}

fn small() -> Writer {
    let mut w = Writer::new();
    w.kv_str("general.architecture", "llama")
        .kv_u32("llama.block_count", 1)
        .kv_f32("llama.attention.layer_norm_rms_epsilon", 1e-5)
        .kv_strs("tokenizer.ggml.tokens", &["a", "b", "ab"])
        .tensor("w", &[4, 2], 0, (0..8u32).flat_map(|i| (i as f32).to_le_bytes()).collect())
        .tensor("q", &[32, 1], 3, vec![7; 20]);
    w
}

#[test]
fn a_valid_file_parses_with_its_offsets() {
    let b = small().bytes();
    let h = Header::parse(&b).unwrap();
    assert_eq!(h.version, 3);
    assert_eq!(h.get("general.architecture").and_then(Value::as_str), Some("llama"));
    assert_eq!(h.get("llama.block_count").and_then(Value::as_u64), Some(1));
    assert_eq!(h.get("tokenizer.ggml.tokens").and_then(Value::as_array).map(|a| a.len()), Some(3));
    let w = h.tensor("w").unwrap();
    assert_eq!((w.ty.name, w.bytes, w.numel()), ("F32", 32, 8));
    assert!(w.offset.is_multiple_of(32) && w.offset == h.data_offset);
    let f: Vec<f32> =
        b[w.offset as usize..][..32].chunks(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
    assert_eq!(f, (0..8).map(|i| i as f32).collect::<Vec<_>>());
    let q = h.tensor("q").unwrap();
    assert_eq!((q.ty.name, q.bytes, q.offset), ("Q4_1", 20, w.offset + 32));
    assert_eq!(h.data_bytes(), 52);
}

fn err(b: &[u8]) -> String {
    format!("{:#}", Header::parse(b).expect_err("must be refused"))
}

#[test]
fn bad_files_are_refused_with_the_cause() {
    let good = small().bytes();
    let end = Header::parse(&good).unwrap().tensor("q").map(|t| (t.offset + t.bytes) as usize).unwrap();
    assert!(err(&good[..end - 1]).contains("tensor `q` (20 bytes at data offset 32) lies outside the file"));
    let t30 = err(&good[..30]);
    assert!(t30.contains("truncated") || t30.contains("more than the"), "{t30}");
    let mut m = good.clone();
    m[0] = b'X';
    assert!(err(&m).contains("not a GGUF file"));
    let mut v = small();
    v.version = 1;
    assert!(err(&v.bytes()).contains("version 1"));
    v.version = 7;
    assert!(err(&v.bytes()).contains("unsupported GGUF version 7"));
    v.version = 3u32.swap_bytes();
    assert!(err(&v.bytes()).contains("big-endian"));
    let mut t = small();
    t.tensor("odd", &[33], 2, vec![0; 18]);
    assert!(err(&t.bytes()).contains("`odd`"));
    let mut u = small();
    u.tensor("strange", &[4], 99, vec![0; 4]);
    assert!(err(&u.bytes()).contains("tensor `strange` has unknown ggml type 99"));
    let mut d = small();
    d.kv_u32("llama.block_count", 2);
    assert!(err(&d.bytes()).contains("appears twice"));
    // A tensor count the file cannot hold is refused before any allocation.
    let mut c = good.clone();
    c[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
    assert!(err(&c).contains("tensor count"));
}

#[test]
fn open_refuses_a_model_over_the_budget_before_loading() {
    let dir = std::env::temp_dir().join(format!("tfbench-gguf-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("m.gguf");
    std::fs::write(&p, small().bytes()).unwrap();
    let f = GgufFile::open(&p, Some(1 << 20)).unwrap();
    assert_eq!(f.data(f.header.tensor("q").unwrap()), &[7u8; 20][..]);
    let e = format!("{:#}", GgufFile::open(&p, Some(10)).err().unwrap());
    assert!(e.contains("need 0.0 MiB") && e.contains("budget") && e.contains("m.gguf"), "{e}");
    std::fs::remove_dir_all(&dir).ok();
}

/// Seeded random byte flips, overwrites with extreme integers, splices and
/// truncations of a valid file: the parser returns `Ok` or `Err`, never
/// panics, and (with the counting allocator installed) never allocates far
/// more than the file's size.
#[test]
fn fuzzed_headers_never_panic_or_allocate_without_bound() {
    let good = small().bytes();
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let (mut ok, mut bad) = (0, 0);
    for _ in 0..20_000 {
        let mut b = good.clone();
        for _ in 0..1 + next() % 4 {
            let i = (next() as usize) % b.len();
            match next() % 5 {
                0 => b[i] ^= 1 << (next() % 8),
                1 => b[i] = next() as u8,
                2 if i + 8 <= b.len() => {
                    let v = [u64::MAX, 1 << 40, 1 << 62, 0, 0xffff_ffff][(next() % 5) as usize];
                    b[i..i + 8].copy_from_slice(&v.to_le_bytes());
                }
                3 => b.truncate(i),
                _ => {
                    let j = (next() as usize) % b.len();
                    b[i] = b[j];
                }
            }
            if b.is_empty() {
                break;
            }
        }
        let before = crate::alloc::reset_peak();
        let r = std::panic::catch_unwind(|| Header::parse(&b).is_ok());
        let peak = crate::alloc::peak().saturating_sub(before);
        match r {
            Ok(true) => ok += 1,
            Ok(false) => bad += 1,
            Err(_) => panic!("parser panicked on {b:02x?}"),
        }
        if crate::alloc::is_installed() {
            // Values are at most a few dozen bytes each per file byte.
            assert!(peak <= 64 * b.len() + 65536, "parse of {} bytes peaked at {peak} bytes", b.len());
        }
    }
    assert!(ok > 0 && bad > 0, "the mutations should yield both outcomes: {ok} ok, {bad} refused");
}
