//! Parameter helpers every suite uses: a reproducible seed per case, a
//! string parameter from a fixed set, element counts and 2-D shapes. They
//! live here, not in a suite, so that no suite imports another. (A case's
//! threads come from its execution context, [`crate::backend::cpu::Context`].)

use crate::plan::Case;
use anyhow::{Result, bail};

/// A reproducible seed derived from the case id (FNV-1a).
pub(crate) fn seed(case: &Case) -> u64 {
    case.id.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x0100_0000_01b3))
}

/// The string parameter `key`, which must be one of `valid`.
pub(crate) fn choice<'a>(case: &Case, key: &str, valid: &[&'a str]) -> Result<&'a str> {
    let got = case.str(key)?;
    match valid.iter().find(|v| **v == got) {
        Some(v) => Ok(v),
        None => bail!("case {}: `{key}` = `{got}` is not valid; valid: {}", case.id, valid.join(", ")),
    }
}

/// The positive integer parameter `elements`.
pub(crate) fn elements(case: &Case) -> Result<usize> {
    let n = case.usize("elements")?;
    if n == 0 {
        bail!("case {}: `elements` must be positive", case.id);
    }
    Ok(n)
}

/// A two-dimensional `shape` parameter, `ROWSxCOLS`.
pub(crate) fn shape2(case: &Case) -> Result<(usize, usize)> {
    match case.shape("shape")?.as_slice() {
        &[r, c] => Ok((r, c)),
        other => bail!("case {}: `shape` must be ROWSxCOLS, got {} dimensions", case.id, other.len()),
    }
}
