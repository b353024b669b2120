//! OpenBLAS's `cblas_sgemm`, loaded at run time, as the reference BLAS the
//! tensor suite's GEMMs are measured beside (`impl=openblas`).
//!
//! Loaded with `dlopen`, not linked: the binary builds and runs without
//! OpenBLAS, and a case that wants it is skipped with a reason saying how to
//! get it. Where it looks, first match wins:
//!
//! 1. `$TFBENCH_OPENBLAS`, a path to the library (only that, when set);
//! 2. `openblas/libscipy_openblas.so` in the data folder
//!    ([`crate::data`]), which `scripts/fetch-test-data.sh` fills
//!    from PyPI's `scipy-openblas32`: the OpenBLAS NumPy and SciPy ship,
//!    self-contained, built for every x86-64 core with its kernel chosen at
//!    load time;
//! 3. the system's `libopenblas.so.0`, in the loader's search path or where
//!    Debian's `libopenblas0-pthread` puts it.
//!
//! Only the 32-bit-integer (LP64) interface is used; symbols are looked up
//! plain (`cblas_sgemm`) or with SciPy's prefix (`scipy_cblas_sgemm`).
//!
//! OpenBLAS's thread count is one setting for the whole process; it is set
//! before each product when it differs from the last one set. After a call
//! its worker threads spin for a while (`OPENBLAS_THREAD_TIMEOUT`) before
//! they sleep, which takes CPU from whatever runs next: the next case's
//! warm-up absorbs it.

use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

/// `cblas_sgemm(order, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)`.
type Sgemm = unsafe extern "C" fn(
    c_int,
    c_int,
    c_int,
    c_int,
    c_int,
    c_int,
    f32,
    *const f32,
    c_int,
    *const f32,
    c_int,
    f32,
    *mut f32,
    c_int,
);
type SetThreads = unsafe extern "C" fn(c_int);
type GetConfig = unsafe extern "C" fn() -> *const c_char;

const CBLAS_ROW_MAJOR: c_int = 101;
const CBLAS_NO_TRANS: c_int = 111;

/// The file `scripts/fetch-test-data.sh` puts in the data folder.
pub const FETCHED: &str = "openblas/libscipy_openblas.so";

/// A loaded OpenBLAS (kept loaded for the life of the process).
pub struct OpenBlas {
    sgemm: Sgemm,
    set_threads: SetThreads,
    /// Threads last set with `openblas_set_num_threads` (0: never).
    threads: AtomicUsize,
    /// `openblas_get_config()`: version, build options and the core kernel
    /// chosen for this CPU, e.g. `OpenBLAS 0.3.34 DYNAMIC_ARCH ... SapphireRapids`.
    pub config: String,
    /// Where it was loaded from.
    pub path: String,
}

/// The OpenBLAS this process uses, loaded on first call; `Err` says where
/// it looked and how to get one.
pub fn load() -> Result<&'static OpenBlas, &'static str> {
    static LIB: OnceLock<Result<OpenBlas, String>> = OnceLock::new();
    LIB.get_or_init(find).as_ref().map_err(String::as_str)
}

fn find() -> Result<OpenBlas, String> {
    let how = "run scripts/fetch-test-data.sh (fetches PyPI's scipy-openblas32 into the data folder), \
               install Debian's libopenblas0, or set TFBENCH_OPENBLAS to a libopenblas.so";
    let candidates: Vec<String> = match std::env::var_os("TFBENCH_OPENBLAS") {
        Some(p) => vec![p.to_string_lossy().into_owned()],
        None => vec![
            // Absolute when it exists, so results say exactly which file ran.
            match crate::data::find(FETCHED) {
                Ok(p) => std::fs::canonicalize(&p).unwrap_or(p).to_string_lossy().into_owned(),
                // Not in any data folder: the library name alone, which
                // dlopen then refuses with a short message.
                Err(_) => FETCHED.rsplit('/').next().unwrap_or(FETCHED).to_string(),
            },
            "libopenblas.so.0".into(),
            "libopenblas.so".into(),
            // Debian's libopenblas0-pthread keeps it out of the search path.
            format!("/usr/lib/{}-linux-gnu/openblas-pthread/libopenblas.so.0", std::env::consts::ARCH),
        ],
    };
    let mut tried = Vec::new();
    for path in &candidates {
        match open(path) {
            Ok(lib) => return Ok(lib),
            // dlopen's own message usually names the file already.
            Err(e) if e.contains(path.as_str()) => tried.push(e),
            Err(e) => tried.push(format!("{path}: {e}")),
        }
    }
    Err(format!("no usable OpenBLAS ({}); {how}", tried.join("; ")))
}

#[cfg(unix)]
fn open(path: &str) -> Result<OpenBlas, String> {
    let name = CString::new(path).map_err(|_| "path contains a NUL byte".to_string())?;
    // SAFETY: dlopen with a valid C string; RTLD_LOCAL keeps its symbols out
    // of the global namespace. The handle is never closed (the library stays
    // for the process, as `load` hands out 'static references into it).
    let handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if handle.is_null() {
        return Err(dl_error());
    }
    let sym = |base: &str| -> Result<*mut c_void, String> {
        for prefix in ["", "scipy_"] {
            let s = CString::new(format!("{prefix}{base}")).map_err(|e| e.to_string())?;
            // SAFETY: a valid handle and C string.
            let p = unsafe { libc::dlsym(handle, s.as_ptr()) };
            if !p.is_null() {
                return Ok(p);
            }
        }
        Err(format!("loaded, but has no {base} (not an LP64 OpenBLAS?)"))
    };
    let (sgemm, set_threads, get_config) =
        (sym("cblas_sgemm")?, sym("openblas_set_num_threads")?, sym("openblas_get_config")?);
    // SAFETY: these symbols have these C signatures in every OpenBLAS
    // with the LP64 interface (the only one whose names have no suffix).
    let (sgemm, set_threads, get_config) = unsafe {
        (
            std::mem::transmute::<*mut c_void, Sgemm>(sgemm),
            std::mem::transmute::<*mut c_void, SetThreads>(set_threads),
            std::mem::transmute::<*mut c_void, GetConfig>(get_config),
        )
    };
    // SAFETY: openblas_get_config returns a static NUL-terminated string.
    let config = unsafe {
        let p = get_config();
        if p.is_null() {
            "OpenBLAS (no config string)".into()
        } else {
            CStr::from_ptr(p).to_string_lossy().into_owned()
        }
    };
    Ok(OpenBlas {
        sgemm,
        set_threads,
        threads: AtomicUsize::new(0),
        config: config.trim().to_string(),
        path: path.into(),
    })
}

#[cfg(unix)]
fn dl_error() -> String {
    // SAFETY: dlerror returns null or a NUL-terminated message.
    let p = unsafe { libc::dlerror() };
    if p.is_null() {
        "dlopen failed".into()
    } else {
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

#[cfg(not(unix))]
fn open(_path: &str) -> Result<OpenBlas, String> {
    Err("loading OpenBLAS at run time is implemented for Unix only".into())
}

impl OpenBlas {
    /// Makes OpenBLAS use `threads` threads (the caller's included) from
    /// now on, for the whole process.
    pub fn set_threads(&self, threads: usize) {
        let threads = threads.clamp(1, c_int::MAX as usize);
        if self.threads.swap(threads, Ordering::Relaxed) != threads {
            // SAFETY: openblas_set_num_threads takes any positive count.
            unsafe { (self.set_threads)(threads as c_int) };
        }
    }

    /// `c[m x n] = a[m x k] * b[k x n]`, row-major, with the thread count
    /// last set ([`OpenBlas::set_threads`]).
    ///
    /// # Panics
    /// When a slice does not match its shape, or a dimension does not fit
    /// OpenBLAS's 32-bit integers.
    pub fn sgemm(&self, (m, k, n): (usize, usize, usize), a: &[f32], b: &[f32], c: &mut [f32]) {
        assert!(a.len() == m * k && b.len() == k * n && c.len() == m * n, "openblas sgemm: shape mismatch");
        let int = |x: usize| c_int::try_from(x).expect("openblas sgemm: dimension above 2^31");
        // BLAS requires leading dimensions of at least 1, even when empty.
        let (mi, ki, ni) = (int(m), int(k), int(n));
        // SAFETY: row-major m x k, k x n and m x n matrices at the slices'
        // exact extents, leading dimensions k and n (>= 1).
        unsafe {
            (self.sgemm)(
                CBLAS_ROW_MAJOR,
                CBLAS_NO_TRANS,
                CBLAS_NO_TRANS,
                mi,
                ni,
                ki,
                1.0,
                a.as_ptr(),
                ki.max(1),
                b.as_ptr(),
                ni.max(1),
                0.0,
                c.as_mut_ptr(),
                ni.max(1),
            )
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lib() -> Option<&'static OpenBlas> {
        match load() {
            Ok(l) => Some(l),
            Err(e) => {
                eprintln!("skipping: {e}");
                None
            }
        }
    }

    #[test]
    fn products_match_the_triple_loop_on_one_and_two_threads() {
        let Some(lib) = lib() else { return };
        assert!(lib.config.contains("OpenBLAS"), "{}", lib.config);
        for threads in [1, 2] {
            lib.set_threads(threads);
            for (m, k, n) in
                [(1, 1, 1), (7, 13, 5), (65, 33, 17), (1, 300, 7), (129, 64, 130), (200, 300, 100)]
            {
                let a = crate::util::randn(m * k, 1);
                let b = crate::util::randn(k * n, 2);
                let mut c = vec![f32::NAN; m * n];
                lib.sgemm((m, k, n), &a, &b, &mut c);
                for i in 0..m {
                    for j in 0..n {
                        let (mut s, mut abs) = (0.0f64, 0.0f64);
                        for p in 0..k {
                            let x = a[i * k + p] as f64 * b[p * n + j] as f64;
                            s += x;
                            abs += x.abs();
                        }
                        let tol = 8.0 * (k as f64).sqrt() * f32::EPSILON as f64 * abs + 1e-30;
                        let got = c[i * n + j] as f64;
                        assert!(
                            (got - s).abs() <= tol,
                            "{threads} threads {m}x{k}x{n} C[{i},{j}]: {got} vs {s}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn a_missing_library_is_an_error_that_says_how_to_get_one() {
        let err = open("/nonexistent/libopenblas.so").err().expect("no such file");
        assert!(err.contains("/nonexistent/libopenblas.so"), "{err}");
        // A library without cblas_sgemm (libc's math library) is refused.
        let err = open("libm.so.6").err().expect("libm is no BLAS");
        assert!(err.contains("cblas_sgemm"), "{err}");
    }
}
