//! The directory of baselines: one `<name>.json` file per baseline, written
//! atomically so a reader never sees half a file.

use super::{Baseline, parse_baseline};
use crate::results::RunReport;
use anyhow::{Context, Result, anyhow, bail};
use serde::Serialize;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Longest accepted baseline name: with `.json` and the temporary-file
/// decoration of [`crate::util::write_atomic`] it stays under the usual
/// 255-byte file name limit.
pub const MAX_NAME_LEN: usize = 200;

/// `util::write_atomic` names its temporary file from the process id and the
/// clock's nanoseconds, which two threads of one process can share; saves in
/// this process therefore take turns. Other processes differ by pid, and the
/// final rename is atomic, so concurrent saves never mix their bytes.
static SAVE_LOCK: Mutex<()> = Mutex::new(());

/// Checks a baseline name: `[A-Za-z0-9._-]+`, not starting with `.`, at most
/// [`MAX_NAME_LEN`] characters. The name becomes a file name, so anything
/// else (slashes, `..`, spaces) is refused rather than escaped.
pub fn validate_name(name: &str) -> Result<()> {
    if name.is_empty() {
        bail!("baseline name is empty");
    }
    if name.len() > MAX_NAME_LEN {
        bail!("baseline name is longer than {MAX_NAME_LEN} characters");
    }
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if name.starts_with('.') || !name.chars().all(allowed) {
        bail!("invalid baseline name `{name}`: use letters, digits, '.', '_' and '-', not starting with '.'");
    }
    Ok(())
}

/// One line of `baseline list`.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct BaselineInfo {
    /// Baseline name (the file stem).
    pub name: String,
    /// When it was saved, RFC 3339; empty when the file is unreadable.
    pub saved_at: String,
    /// CPU model of the machine it ran on; empty when unreadable.
    pub cpu_model: String,
    /// Machine fingerprint; empty when unreadable.
    pub fingerprint: String,
    /// Number of cases in the report.
    pub cases: usize,
    /// Number of those that failed.
    pub failed: usize,
    /// The file.
    pub path: PathBuf,
    /// Why the file could not be read, if it could not; the other fields
    /// are then empty or zero.
    pub problem: Option<String>,
}

/// A directory of saved baselines.
#[derive(Debug, Clone)]
pub struct Store {
    dir: PathBuf,
}

impl Store {
    /// A store in `dir`; nothing is touched until something is saved.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    /// The directory holding the baselines.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file baseline `name` lives in, after checking the name.
    pub fn path_of(&self, name: &str) -> Result<PathBuf> {
        validate_name(name)?;
        Ok(self.dir.join(format!("{name}.json")))
    }

    /// Saves `report` as baseline `name`, replacing any previous one, and
    /// returns the file written. The directory is created if needed. The
    /// write is atomic: until the new file is complete, the old one stays.
    pub fn save(&self, name: &str, report: &RunReport) -> Result<PathBuf> {
        let path = self.path_of(name)?;
        std::fs::create_dir_all(&self.dir)
            .with_context(|| format!("cannot create baseline directory {}", self.dir.display()))?;
        let mut text = serde_json::to_string_pretty(&Baseline::new(name, report))
            .with_context(|| format!("cannot serialize baseline `{name}`"))?;
        text.push('\n');
        // A poisoned lock only means another save panicked; the file system
        // state it guards is still consistent.
        let _turn = SAVE_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        crate::util::write_atomic(&path, text.as_bytes())
            .with_context(|| format!("cannot save baseline `{name}`"))?;
        Ok(path)
    }

    /// Adds `report` to baseline `name` as its newest run, keeping the runs
    /// it already holds (creates it when missing). Refused, with nothing
    /// written, when the stored runs come from another build or machine.
    pub fn append(&self, name: &str, report: &RunReport) -> Result<PathBuf> {
        let path = self.path_of(name)?;
        let existing = match std::fs::read_to_string(&path) {
            Ok(text) => Some(
                parse_baseline(&text)
                    .with_context(|| format!("baseline file {} is unusable", path.display()))?,
            ),
            Err(e) if e.kind() == ErrorKind::NotFound => None,
            Err(e) => return Err(anyhow!(e).context(format!("cannot read baseline file {}", path.display()))),
        };
        let Some(old) = existing else { return self.save(name, report) };
        let mut runs = old.runs();
        runs.push(report.clone());
        super::check_same_build_and_machine(&format!("--append to baseline `{name}`"), &runs)
            .context("start a new baseline (another name, or without --append)")?;
        let mut b = super::Baseline::new(name, report);
        runs.pop();
        b.earlier_runs = runs;
        self.write(name, &path, &b)
    }

    fn write(&self, name: &str, path: &Path, b: &super::Baseline) -> Result<PathBuf> {
        std::fs::create_dir_all(&self.dir)
            .with_context(|| format!("cannot create baseline directory {}", self.dir.display()))?;
        let mut text =
            serde_json::to_string_pretty(b).with_context(|| format!("cannot serialize baseline `{name}`"))?;
        text.push('\n');
        let _turn = SAVE_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        crate::util::write_atomic(path, text.as_bytes())
            .with_context(|| format!("cannot save baseline `{name}`"))?;
        Ok(path.to_path_buf())
    }

    /// Loads baseline `name`. A missing baseline is an error listing the
    /// available ones; an unreadable, corrupt or other-version file is an
    /// error naming the file and the problem.
    pub fn load(&self, name: &str) -> Result<Baseline> {
        let path = self.path_of(name)?;
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == ErrorKind::NotFound => return Err(self.not_found(name)),
            Err(e) => return Err(anyhow!(e).context(format!("cannot read baseline file {}", path.display()))),
        };
        parse_baseline(&text).with_context(|| format!("baseline file {} is unusable", path.display()))
    }

    /// Every baseline in the directory, sorted by name. A file that cannot
    /// be read is listed with its [`BaselineInfo::problem`] instead of
    /// failing the listing; a missing directory lists nothing.
    pub fn list(&self) -> Result<Vec<BaselineInfo>> {
        let mut infos: Vec<BaselineInfo> = self
            .names()?
            .into_iter()
            .map(|name| {
                let path = self.dir.join(format!("{name}.json"));
                match self.load(&name) {
                    Ok(b) => BaselineInfo {
                        name,
                        saved_at: b.saved_at,
                        cpu_model: b.report.environment.cpu_model.clone(),
                        fingerprint: b.machine_fingerprint,
                        cases: b.report.cases.len(),
                        failed: b.report.failed_count(),
                        path,
                        problem: None,
                    },
                    Err(e) => BaselineInfo {
                        name,
                        saved_at: String::new(),
                        cpu_model: String::new(),
                        fingerprint: String::new(),
                        cases: 0,
                        failed: 0,
                        path,
                        problem: Some(format!("{e:#}")),
                    },
                }
            })
            .collect();
        infos.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(infos)
    }

    /// Deletes baseline `name`; a missing one is the same error as in
    /// [`Store::load`].
    pub fn delete(&self, name: &str) -> Result<()> {
        let path = self.path_of(name)?;
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == ErrorKind::NotFound => Err(self.not_found(name)),
            Err(e) => Err(anyhow!(e).context(format!("cannot delete baseline file {}", path.display()))),
        }
    }

    /// Names of the `*.json` files with valid baseline names, sorted. Temporary
    /// files of saves in progress start with `.` and are skipped.
    fn names(&self) -> Result<Vec<String>> {
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => {
                return Err(
                    anyhow!(e).context(format!("cannot read baseline directory {}", self.dir.display()))
                );
            }
        };
        let mut names = Vec::new();
        for entry in entries {
            let entry =
                entry.with_context(|| format!("cannot read baseline directory {}", self.dir.display()))?;
            let file_name = entry.file_name();
            let Some(name) = file_name.to_str().and_then(|n| n.strip_suffix(".json")) else { continue };
            if validate_name(name).is_ok() && entry.path().is_file() {
                names.push(name.to_string());
            }
        }
        names.sort();
        Ok(names)
    }

    /// The error for a baseline that does not exist, naming the ones that do.
    fn not_found(&self, name: &str) -> anyhow::Error {
        let dir = self.dir.display();
        match self.names() {
            Ok(names) if names.is_empty() => {
                anyhow!("baseline `{name}` not found: no baselines saved in {dir} yet")
            }
            Ok(names) => anyhow!("baseline `{name}` not found in {dir}; available: {}", names.join(", ")),
            Err(e) => anyhow!("baseline `{name}` not found ({e:#})"),
        }
    }
}
