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
    pub fn kv_u64(&mut self, key: &str, v: u64) -> &mut Self {
        string(&mut self.kv, key);
        self.kv.extend_from_slice(&10u32.to_le_bytes());
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

/// A header of `n_tensors` tensors and `n_kv` key/values (as the counts say,
/// whatever follows), then `tail`.
fn counts(n_tensors: u64, n_kv: u64, tail: &[u8]) -> Vec<u8> {
    let mut b = b"GGUF".to_vec();
    b.extend(3u32.to_le_bytes());
    b.extend(n_tensors.to_le_bytes());
    b.extend(n_kv.to_le_bytes());
    b.extend_from_slice(tail);
    b
}

/// One key/value `key` of type `ty` with raw payload `v`.
fn kv(key: &str, ty: u32, v: &[u8]) -> Vec<u8> {
    let mut b = Vec::new();
    string(&mut b, key);
    b.extend(ty.to_le_bytes());
    b.extend_from_slice(v);
    b
}

/// An array payload: element type, length, then `elems`.
fn arr(et: u32, n: u64, elems: &[u8]) -> Vec<u8> {
    let mut b = et.to_le_bytes().to_vec();
    b.extend(n.to_le_bytes());
    b.extend_from_slice(elems);
    b
}

/// Parses under the counting allocator: the outcome (`Err` as its text) and
/// the peak bytes gained while parsing.
fn parse_peak(b: &[u8]) -> (Result<Header, String>, usize) {
    let before = crate::alloc::reset_peak();
    let r = Header::parse(b).map_err(|e| format!("{e:#}"));
    (r, crate::alloc::peak().saturating_sub(before))
}

/// Every count of the format, set far beyond what the file holds, is
/// refused naming the count, its value and what was left, and the refusal
/// allocates almost nothing.
#[test]
fn each_hostile_count_is_refused_naming_it() {
    let big = [u64::MAX, 1 << 62, 4_000_000_000, 1 << 20];
    for n in big {
        let cases: Vec<(Vec<u8>, String)> = vec![
            (counts(n, 0, &[0; 64]), format!("tensor count at byte 8 is {n}")),
            (counts(0, n, &[0; 64]), format!("metadata count at byte 16 is {n}")),
            (counts(0, 1, &kv("k", 8, &n.to_le_bytes())), format!("metadata `k` string at byte 37 is {n}")),
            (
                counts(0, 1, &kv("k", 9, &arr(0, n, &[1; 64]))),
                format!("metadata `k` array length at byte 41 is {n}"),
            ),
            (counts(0, 1, &kv("k", 9, &arr(8, n, &[0; 64]))), format!("`k` array length at byte 41 is {n}")),
            (counts(0, 1, &kv("k", 9, &arr(9, n, &[0; 64]))), format!("`k` array length at byte 41 is {n}")),
        ];
        // A key length beyond the file.
        let mut key = counts(0, 1, &n.to_le_bytes());
        key.extend([0; 32]);
        for (b, want) in cases.into_iter().chain([(key, format!("metadata key 0 at byte 24 is {n}"))]) {
            let (r, peak) = parse_peak(&b);
            let e = r.expect_err("must be refused");
            assert!(e.contains(&want) && e.contains("more than the"), "want {want:?}: {e}");
            if crate::alloc::is_installed() {
                assert!(peak < 4096, "refusing {want:?} peaked at {peak} bytes");
            }
        }
    }
    // Tensor dimensions: beyond ggml's int64, or a product that overflows.
    let mut w = small();
    w.tensor("huge", &[1 << 63, 1], 0, vec![]);
    assert!(err(&w.bytes()).contains("tensor `huge` has a dimension of 9223372036854775808"));
    let mut w = small();
    w.tensor("wide", &[1 << 40, 1 << 40], 0, vec![]);
    assert!(err(&w.bytes()).contains("`wide` [1099511627776, 1099511627776] of F32"));
    let mut w = small();
    w.tensor("far", &[1 << 30, 4], 0, vec![]);
    assert!(
        err(&w.bytes()).contains("tensor `far` (17179869184 bytes at data offset 64) lies outside the file")
    );
    for nd in [0u32, 5, u32::MAX] {
        let mut t = Vec::new();
        string(&mut t, "t");
        t.extend(nd.to_le_bytes());
        t.extend([0; 64]);
        let e = err(&counts(1, 0, &t));
        assert!(e.contains(&format!("tensor `t` has {nd} dimensions; ggml allows 1 to 4")), "{e}");
    }
}

/// An array's length is trusted for sizing only once its elements are found:
/// a length the remaining bytes could hold at the smallest encoding, of
/// elements that are not there, is refused without reserving its vector.
#[test]
fn an_array_length_reserves_nothing_before_its_elements_are_read() {
    // 1 MiB of 0xff after a string array's length of (bytes left) / 8: the
    // first string's length runs past the end. Reserving the vector first
    // would take 32 bytes per claimed element, 4 MiB.
    let rest = vec![0xffu8; 1 << 20];
    let b = counts(0, 1, &kv("tokenizer.ggml.tokens", 9, &arr(8, (rest.len() / 8) as u64, &rest)));
    let (r, peak) = parse_peak(&b);
    let e = r.expect_err("must be refused");
    assert!(e.contains("metadata `tokenizer.ggml.tokens` string") && e.contains("more than the"), "{e}");
    // Two nested arrays of bools, the second with a bad one: found before
    // the first is built (it would take 32 bytes per bool, 16 MiB).
    let mut nested = arr(9, 2, &arr(7, 1 << 19, &vec![1u8; 1 << 19]));
    let mut bad = vec![0u8; 1 << 19];
    bad[1000] = 2;
    nested.extend(arr(7, 1 << 19, &bad));
    let (r2, peak2) = parse_peak(&counts(0, 1, &kv("n", 9, &nested)));
    let e2 = r2.expect_err("must be refused");
    assert!(e2.contains("metadata `n`: bool byte at") && e2.contains("is 2, not 0 or 1"), "{e2}");
    if crate::alloc::is_installed() {
        assert!(peak < 4096, "refusing the string array peaked at {peak} bytes");
        assert!(peak2 < 4096, "refusing the nested arrays peaked at {peak2} bytes");
    }
}

/// A valid header's memory: the worst case, one-byte array elements, takes
/// at most 40 bytes per byte of file (each is a 32-byte `Value`), as the
/// module doc says; a long vocabulary of strings takes less per byte.
#[test]
fn a_valid_headers_memory_is_bounded_by_its_bytes() {
    let n = 100_000u64;
    let bytes = counts(0, 1, &kv("u8s", 9, &arr(0, n, &vec![1u8; n as usize])));
    let (r, peak) = parse_peak(&bytes);
    let h = r.unwrap();
    assert_eq!(h.get("u8s").and_then(Value::as_array).map(<[Value]>::len), Some(n as usize));
    let mut w = Writer::new();
    let tokens: Vec<String> = (0..20_000).map(|i| format!("tok{i}")).collect();
    w.kv_strs("tokenizer.ggml.tokens", &tokens.iter().map(String::as_str).collect::<Vec<_>>());
    let vocab = w.bytes();
    let (r2, peak2) = parse_peak(&vocab);
    assert!(r2.is_ok());
    if crate::alloc::is_installed() {
        assert!(peak <= 40 * bytes.len(), "{} header bytes peaked at {peak}", bytes.len());
        assert!(peak2 <= 40 * vocab.len(), "{} header bytes peaked at {peak2}", vocab.len());
    }
}

/// Duplicate keys and tensor names are found wherever they sit in a long
/// list (a hash set, not a scan per entry).
#[test]
fn duplicates_are_found_in_long_lists() {
    let mut w = Writer::new();
    for i in 0..5000 {
        w.kv_u32(&format!("k{i}"), i);
    }
    w.kv_u32("k4999", 1);
    assert!(err(&w.bytes()).contains("metadata key `k4999` appears twice"));
    let mut w = Writer::new();
    for i in 0..5000 {
        w.tensor(&format!("t{i}"), &[1], 0, vec![0; 4]);
    }
    assert!(Header::parse(&w.bytes()).is_ok());
    w.tensor("t17", &[1], 0, vec![0; 4]);
    assert!(err(&w.bytes()).contains("tensor `t17` appears twice"));
}
