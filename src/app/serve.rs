//! `tfbench serve`: the live dashboard (see `crate::live`).

use crate::cli::ServeArgs;
use crate::live::server::Dashboard;
use crate::live::{DashboardFile, new_token};
use anyhow::{Result, bail};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};

/// Set by SIGINT/SIGTERM: the dashboard stops and removes its file.
static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

/// Binds, prints where, serves until interrupted.
pub fn serve(args: &ServeArgs) -> Result<super::Outcome> {
    let ip: IpAddr = args.bind.parse().map_err(|_| {
        anyhow::anyhow!("--bind {}: not an IP address (e.g. 127.0.0.1, ::1 or 0.0.0.0)", args.bind)
    })?;
    let baselines = super::baseline_dir(args.dir.baseline_dir.as_deref(), None);
    if args.dir.baseline_dir.is_some() && !baselines.is_dir() {
        bail!("--baseline-dir {}: no such folder", baselines.display());
    }
    if let Some(h) = &args.history_dir
        && !h.is_dir()
    {
        bail!("--history-dir {}: no such folder", h.display());
    }
    let history = super::history_dir(args.history_dir.as_deref(), None, &baselines);
    let sources = crate::live::Sources {
        title: args.title.clone(),
        baselines: baselines.clone(),
        history,
        fingerprint: crate::env::Environment::gather().fingerprint(),
    };
    let token = new_token()?;
    let dash = Dashboard::bind(SocketAddr::new(ip, args.port), sources, token.clone())
        .map_err(|e| anyhow::anyhow!("cannot listen on {ip} port {} (--bind/--port): {e:#}", args.port))?;
    let addr = dash.addr();
    if !ip.is_loopback() {
        eprintln!(
            "warning: --bind {ip}: the dashboard is reachable from the network, unencrypted; anyone who can \
             reach this address reads every stored result (pushes still need the token)"
        );
    }
    let url = crate::live::Endpoint { host: addr.ip().to_string(), port: addr.port() }.url();
    let local_url =
        if ip.is_unspecified() { format!("http://127.0.0.1:{}", addr.port()) } else { url.clone() };
    let file = DashboardFile { url: local_url, token, pid: std::process::id() };
    let path = file.write(addr.port())?;
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    let handler: extern "C" fn(libc::c_int) = on_signal;
    unsafe {
        libc::signal(libc::SIGINT, handler as libc::sighandler_t);
        libc::signal(libc::SIGTERM, handler as libc::sighandler_t);
    }
    super::print_stdout(&format!("tfbench dashboard listening on {url}/\n"))?;
    eprintln!(
        "serving the store {} read-only; runs of this user push with the token in {} (Ctrl-C stops)",
        baselines.display(),
        path.display()
    );
    dash.serve(&STOP);
    // Only our own file: another dashboard may have taken the port since.
    if DashboardFile::read(addr.port()).is_some_and(|f| f.pid == std::process::id()) {
        let _ = std::fs::remove_file(&path);
    }
    eprintln!("dashboard stopped");
    Ok(super::Outcome::Success)
}
