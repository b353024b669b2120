//! A strict reader of GGUF model files (llama.cpp's format, versions 2 and
//! 3): header, metadata key/values, tensor infos, alignment and data offsets.
//!
//! The parser ([`Header::parse`]) works on a byte slice and trusts nothing in
//! it: every count and length is checked against the bytes that remain, and
//! memory is spent only on what has been read. Lists of key/values and
//! tensors grow as their entries are read; an array's elements are walked
//! (and so found to be in the file) before its vector is sized; a string is
//! copied from bytes already in hand. So a count alone reserves nothing, and
//! the parsed header takes at most about 40 bytes of memory per byte of
//! header (a one-byte array element becomes a 32-byte [`Value`], the worst
//! case; strings and tensor entries cost less per byte). Duplicate keys and
//! tensor names are found through hash sets, in time linear in the header.
//! A corrupt or hostile header can neither panic nor allocate beyond that
//! (the unit tests mutate and truncate a valid header thousands of times and
//! measure the peak).
//! [`GgufFile::open`] memory-maps the file (`memmap2`): only the header's
//! pages are read while parsing, and a model larger than the memory budget
//! is refused, with the figures, before any tensor page is touched.
//!
//! What the bytes mean (block formats, architectures) belongs to the kernel
//! library and the model runtime; this module only locates them.

use anyhow::{Context, Result, bail};
use std::collections::HashSet;
use std::path::{Path, PathBuf};

mod types;
pub use types::{GgmlType, SUPPORTED};

#[cfg(test)]
pub(crate) mod tests;

/// `GGUF` read as a little-endian u32.
const MAGIC: &[u8; 4] = b"GGUF";
/// Default data alignment when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// ggml's most dimensions per tensor.
const MAX_DIMS: u32 = 4;
/// Arrays nest at most this deep (GGUF files in practice use one level).
const MAX_DEPTH: usize = 3;

/// A metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// `uint8`.
    U8(u8),
    /// `int8`.
    I8(i8),
    /// `uint16`.
    U16(u16),
    /// `int16`.
    I16(i16),
    /// `uint32`.
    U32(u32),
    /// `int32`.
    I32(i32),
    /// `float32`.
    F32(f32),
    /// `bool`.
    Bool(bool),
    /// UTF-8 `string`.
    Str(String),
    /// `array` of one element type.
    Array(Vec<Value>),
    /// `uint64`.
    U64(u64),
    /// `int64`.
    I64(i64),
    /// `float64`.
    F64(f64),
}

impl Value {
    /// An integer value of any width as u64 (negative values give `None`).
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Self::U8(v) => Some(v.into()),
            Self::U16(v) => Some(v.into()),
            Self::U32(v) => Some(v.into()),
            Self::U64(v) => Some(v),
            Self::I8(v) => u64::try_from(v).ok(),
            Self::I16(v) => u64::try_from(v).ok(),
            Self::I32(v) => u64::try_from(v).ok(),
            Self::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }
    /// A float value (f32 or f64).
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Self::F32(v) => Some(v.into()),
            Self::F64(v) => Some(v),
            _ => None,
        }
    }
    /// A string value.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Self::Str(s) => Some(s),
            _ => None,
        }
    }
    /// An array value.
    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Self::Array(a) => Some(a),
            _ => None,
        }
    }
}

/// One tensor's description.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorInfo {
    /// Name, e.g. `blk.0.attn_q.weight`.
    pub name: String,
    /// ggml dimensions, fastest first (`[cols, rows]` for a matrix).
    pub dims: Vec<u64>,
    /// Storage type.
    pub ty: GgmlType,
    /// Offset of the data from the start of the file (already aligned).
    pub offset: u64,
    /// Bytes of data.
    pub bytes: u64,
}

impl TensorInfo {
    /// Number of values.
    pub fn numel(&self) -> u64 {
        self.dims.iter().product()
    }
}

/// A parsed GGUF header.
#[derive(Debug, Clone)]
pub struct Header {
    /// Format version (2 or 3).
    pub version: u32,
    /// Metadata, in file order.
    pub metadata: Vec<(String, Value)>,
    /// Tensors, in file order.
    pub tensors: Vec<TensorInfo>,
    /// Data alignment (`general.alignment`, default 32).
    pub alignment: u64,
    /// Offset of the tensor data section.
    pub data_offset: u64,
}

/// A bounds-checked cursor over the header bytes.
struct Cursor<'a> {
    b: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn remaining(&self) -> usize {
        self.b.len() - self.pos
    }
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        if n > self.remaining() {
            bail!(
                "truncated: {what} at byte {} needs {n} bytes, only {} remain in the file",
                self.pos,
                self.remaining()
            );
        }
        let s = &self.b[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N]> {
        let s = self.take(N, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }
    fn u32(&mut self, what: &str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }
    fn u64(&mut self, what: &str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }
    /// A count of items at least `min_size` bytes each, refused when the
    /// rest of the file could not hold them (so no allocation is ever sized
    /// by a corrupt count).
    fn count(&mut self, min_size: usize, what: &str) -> Result<usize> {
        let at = self.pos;
        let n = self.u64(what)?;
        let fits = usize::try_from(n)
            .ok()
            .and_then(|n| n.checked_mul(min_size.max(1)))
            .is_some_and(|b| b <= self.remaining());
        if !fits {
            bail!(
                "{what} at byte {at} is {n}, more than the {} bytes left in the file can hold",
                self.remaining()
            );
        }
        Ok(n as usize)
    }
    fn string(&mut self, what: &str) -> Result<String> {
        let at = self.pos;
        let n = self.count(1, what)?;
        let s = self.take(n, what)?;
        String::from_utf8(s.to_vec()).map_err(|_| anyhow::anyhow!("{what} at byte {at} is not valid UTF-8"))
    }
    /// Walks the `n` elements of type `et` of an array without building
    /// them, so that the array's vector is sized only for elements found in
    /// the file (a count alone, even one the remaining bytes could hold at
    /// one byte each, reserves nothing).
    fn skip_elements(&mut self, et: u32, n: usize, key: &str, depth: usize) -> Result<()> {
        if let Some(size) = fixed_size(et) {
            // `count` checked n * size <= the bytes left (size is the minimum).
            let at = self.pos;
            let elems = self.take(n * size, key)?;
            if let (7, Some(i)) = (et, elems.iter().position(|&b| b > 1)) {
                bail!("metadata `{key}`: bool byte at {} is {}, not 0 or 1", at + i, elems[i]);
            }
            return Ok(());
        }
        for _ in 0..n {
            if et == 8 {
                let len = self.count(1, &format!("metadata `{key}` string"))?;
                self.take(len, key)?;
            } else {
                let (inner, m) = self.array_head(key, depth + 1)?;
                self.skip_elements(inner, m, key, depth + 1)?;
            }
        }
        Ok(())
    }
    /// An array's element type and length, the length checked against the
    /// bytes left at the element type's smallest encoding.
    fn array_head(&mut self, key: &str, depth: usize) -> Result<(u32, usize)> {
        if depth >= MAX_DEPTH {
            bail!("metadata `{key}`: arrays nested deeper than {MAX_DEPTH}");
        }
        let et = self.u32(key)?;
        let min = match et {
            8 => 8,
            9 => 12,
            t => fixed_size(t).ok_or_else(|| {
                anyhow::anyhow!("metadata `{key}`: unknown array element type {t} (valid 0-12)")
            })?,
        };
        let n = self.count(min, &format!("metadata `{key}` array length"))?;
        Ok((et, n))
    }
    fn value(&mut self, ty: u32, key: &str, depth: usize) -> Result<Value> {
        let a = |c: &mut Self| c.array::<1>(key).map(|b| b[0]);
        Ok(match ty {
            0 => Value::U8(a(self)?),
            1 => Value::I8(a(self)? as i8),
            2 => Value::U16(u16::from_le_bytes(self.array(key)?)),
            3 => Value::I16(i16::from_le_bytes(self.array(key)?)),
            4 => Value::U32(self.u32(key)?),
            5 => Value::I32(i32::from_le_bytes(self.array(key)?)),
            6 => Value::F32(f32::from_le_bytes(self.array(key)?)),
            7 => match a(self)? {
                0 => Value::Bool(false),
                1 => Value::Bool(true),
                b => bail!("metadata `{key}`: bool byte is {b}, not 0 or 1"),
            },
            8 => Value::Str(self.string(&format!("metadata `{key}` string"))?),
            9 => {
                let (et, n) = self.array_head(key, depth)?;
                let first = self.pos;
                self.skip_elements(et, n, key, depth)?;
                // All n elements are in the file: now the vector may be sized.
                self.pos = first;
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    v.push(self.value(et, key, depth + 1)?);
                }
                Value::Array(v)
            }
            10 => Value::U64(self.u64(key)?),
            11 => Value::I64(i64::from_le_bytes(self.array(key)?)),
            12 => Value::F64(f64::from_le_bytes(self.array(key)?)),
            t => bail!("metadata `{key}`: unknown value type {t} (valid 0-12)"),
        })
    }
}

/// Bytes of a value of fixed-size type `ty` (`None` for strings, arrays and
/// unknown types).
fn fixed_size(ty: u32) -> Option<usize> {
    match ty {
        0 | 1 | 7 => Some(1),
        2 | 3 => Some(2),
        4..=6 => Some(4),
        10..=12 => Some(8),
        _ => None,
    }
}

impl Header {
    /// Parses the header of a GGUF file of `file.len()` bytes (the whole
    /// file, or a memory map of it: only the header's bytes are read), and
    /// checks that every tensor's data lies inside it.
    pub fn parse(file: &[u8]) -> Result<Self> {
        let mut c = Cursor { b: file, pos: 0 };
        let magic = c.array::<4>("magic")?;
        if &magic != MAGIC {
            bail!("not a GGUF file: magic bytes are {magic:02x?}, expected \"GGUF\" (47 47 55 46)");
        }
        let version = c.u32("version")?;
        match version {
            2 | 3 => {}
            1 => bail!("GGUF version 1 (32-bit counts) is not supported; supported versions: 2, 3"),
            v if v.swap_bytes() <= 3 => {
                bail!(
                    "big-endian GGUF (version {}) is not supported; use a little-endian file",
                    v.swap_bytes()
                )
            }
            v => bail!("unsupported GGUF version {v}; supported versions: 2, 3"),
        }
        // Smallest tensor info: empty name (8), n_dims (4), type (4), offset (8).
        let n_tensors = c.count(24, "tensor count")?;
        // Smallest key/value: empty key (8), type (4), a one-byte value.
        let n_kv = c.count(13, "metadata count")?;
        // Both lists grow as their entries are read (see the module doc).
        let mut metadata: Vec<(String, Value)> = Vec::new();
        let mut keys: HashSet<String> = HashSet::new();
        for i in 0..n_kv {
            let key = c.string(&format!("metadata key {i}"))?;
            if !keys.insert(key.clone()) {
                bail!("metadata key `{key}` appears twice");
            }
            let ty = c.u32(&key)?;
            let v = c.value(ty, &key, 0)?;
            metadata.push((key, v));
        }
        drop(keys);
        let alignment = match metadata.iter().find(|(k, _)| k == "general.alignment") {
            None => DEFAULT_ALIGNMENT,
            Some((_, Value::U32(a))) if *a > 0 && a.is_power_of_two() => u64::from(*a),
            Some((_, v)) => bail!("general.alignment is {v:?}; it must be a power-of-two u32"),
        };
        let mut raw = Vec::new();
        for i in 0..n_tensors {
            let name = c.string(&format!("tensor {i} name"))?;
            let nd = c.u32(&name)?;
            if nd == 0 || nd > MAX_DIMS {
                bail!("tensor `{name}` has {nd} dimensions; ggml allows 1 to {MAX_DIMS}");
            }
            let mut dims = Vec::with_capacity(nd as usize);
            for _ in 0..nd {
                let d = c.u64(&name)?;
                // ggml's dimensions are int64_t.
                if d > i64::MAX as u64 {
                    bail!("tensor `{name}` has a dimension of {d}, more than ggml's int64 allows");
                }
                dims.push(d);
            }
            let id = c.u32(&name)?;
            let ty = GgmlType::from_id(id)
                .ok_or_else(|| anyhow::anyhow!("tensor `{name}` has unknown ggml type {id}"))?;
            let offset = c.u64(&name)?;
            raw.push((name, dims, ty, offset));
        }
        let mut names: HashSet<&str> = HashSet::with_capacity(raw.len());
        if let Some((name, ..)) = raw.iter().find(|(name, ..)| !names.insert(name.as_str())) {
            bail!("tensor `{name}` appears twice");
        }
        drop(names);
        let data_offset = (c.pos as u64).next_multiple_of(alignment);
        let len = file.len() as u64;
        let mut tensors: Vec<TensorInfo> = Vec::with_capacity(raw.len());
        for (name, dims, ty, offset) in raw {
            let numel = dims.iter().try_fold(1u64, |a, &d| a.checked_mul(d));
            let bytes = numel.and_then(|n| ty.size_of(n)).ok_or_else(|| {
                anyhow::anyhow!(
                    "tensor `{name}` {dims:?} of {}: not a whole number of {}-value blocks, or too large",
                    ty.name,
                    ty.block
                )
            })?;
            if !offset.is_multiple_of(alignment) {
                bail!("tensor `{name}`: data offset {offset} is not a multiple of the alignment {alignment}");
            }
            let start = data_offset.checked_add(offset);
            let end = start.and_then(|s| s.checked_add(bytes));
            match (start, end) {
                (Some(start), Some(end)) if end <= len => {
                    tensors.push(TensorInfo { name, dims, ty, offset: start, bytes })
                }
                _ => bail!(
                    "tensor `{name}` ({} bytes at data offset {offset}) lies outside the file ({len} bytes, data from byte {data_offset}): truncated or corrupt",
                    bytes
                ),
            }
        }
        Ok(Self { version, metadata, tensors, alignment, data_offset })
    }

    /// The metadata value of `key` (a scan: for the few lookups a loader makes).
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.metadata.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// The tensor named `name` (a scan: a loader looking up every tensor of
    /// a model indexes [`Header::tensors`] by name instead).
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensors.iter().find(|t| t.name == name)
    }

    /// Bytes of all tensor data.
    pub fn data_bytes(&self) -> u64 {
        // Saturating: tensors may share bytes, so the sum is not bounded by the file.
        self.tensors.iter().fold(0u64, |a, t| a.saturating_add(t.bytes))
    }

    /// Number of values in all tensors.
    pub fn params(&self) -> u64 {
        self.tensors.iter().fold(0u64, |a, t| a.saturating_add(t.numel()))
    }
}

/// An open, memory-mapped GGUF file.
pub struct GgufFile {
    /// Where it was read from.
    pub path: PathBuf,
    /// The parsed header.
    pub header: Header,
    map: memmap2::Mmap,
}

impl GgufFile {
    /// Maps `path` and parses its header. `budget`, when given, is the most
    /// bytes the model may occupy: a file whose tensor data exceeds it is
    /// refused with both figures before any tensor page is read.
    pub fn open(path: &Path, budget: Option<u64>) -> Result<Self> {
        let f = std::fs::File::open(path).with_context(|| format!("model file {}", path.display()))?;
        // SAFETY: the map is read-only; tfbench never writes model files, and
        // another process truncating the file while it is mapped is outside
        // what a benchmark run can defend against (llama.cpp maps it too).
        let map = unsafe { memmap2::Mmap::map(&f) }
            .with_context(|| format!("model file {}: cannot map it", path.display()))?;
        let header = Header::parse(&map).with_context(|| format!("model file {}", path.display()))?;
        if let Some(b) = budget
            && header.data_bytes() > b
        {
            bail!(
                "model file {}: its tensors need {:.1} MiB but the memory budget is {:.1} MiB; nothing was loaded",
                path.display(),
                header.data_bytes() as f64 / 1048576.0,
                b as f64 / 1048576.0
            );
        }
        Ok(Self { path: path.to_path_buf(), header, map })
    }

    /// The data bytes of tensor `t` (a slice of the map: reading it pages
    /// the tensor in).
    pub fn data(&self, t: &TensorInfo) -> &[u8] {
        // parse checked offset + bytes <= file length.
        &self.map[t.offset as usize..(t.offset + t.bytes) as usize]
    }

    /// The file's size in bytes.
    pub fn file_bytes(&self) -> u64 {
        self.map.len() as u64
    }
}
