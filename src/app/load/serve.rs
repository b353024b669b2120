//! `tfbench load --serve ADDR`: the in-process engine behind an
//! OpenAI-compatible HTTP endpoint ([`crate::load::server`]); and, on the
//! client's side, the check of a server's streamed token ids against the
//! model runtime's own greedy generation.

use super::Outcome;
use super::imp::{Run, Settings, Setup, build};
use crate::cli::load::LoadArgs;
use crate::load::engine::{Engine, TokenCheck, compare_tokens};
use crate::load::server::ModelServer;
use crate::load::workload::Tokenize;
use crate::model::config::ModelConfig;
use anyhow::{Context, Result, bail};
use std::io::Write;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

/// `--serve`'s address: `host:port`, resolved (port 0: a free one).
pub(super) fn address(addr: &str) -> Result<SocketAddr> {
    let mut all = addr
        .to_socket_addrs()
        .with_context(|| format!("--serve {addr}: not host:port (127.0.0.1:8080; port 0 for a free one)"))?;
    all.next().with_context(|| format!("--serve {addr}: resolves to no address"))
}

/// Serves until SIGINT or SIGTERM.
pub(super) fn serve(a: &LoadArgs, s: &Settings, addr: &str) -> Result<Outcome> {
    let addr = address(addr)?;
    let setup = build(a, s)?;
    let Setup { target, model, tokenizer, vocab, label, engine, .. } = setup;
    // The engine `build` started is for scenarios: a fresh one is served.
    drop(target);
    let (Some(model), Some(cfg)) = (model, engine) else { bail!("--serve: no engine to serve") };
    let name = match &a.model {
        Some(p) => p.file_name().map_or_else(|| p.display().to_string(), |n| n.to_string_lossy().into()),
        None => a.preset.clone(),
    };
    let engine = Engine::start(model, cfg)?;
    let server = ModelServer::bind(addr, engine, tokenizer, vocab, name)?;
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        let handler: extern "C" fn(libc::c_int) = on_signal;
        libc::signal(libc::SIGINT, handler as libc::sighandler_t);
        libc::signal(libc::SIGTERM, handler as libc::sighandler_t);
    }
    let url = format!("http://{}/v1/completions", server.addr());
    // The first line names the URL (scripts and tests read it), then the
    // rest, in one write: a reader that takes the first line and closes the
    // pipe must not stop the server, so a closed stdout is not an error here.
    let banner = format!(
        "tfbench load: serving {label} at {url}\n  POST /v1/completions (prompt: text or token ids; stream; greedy, \
         end-of-sequence ignored), GET /health; up to {} positions per request; Ctrl-C stops\n",
        s.workload.max_positions()
    );
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(banner.as_bytes()).and_then(|()| out.flush());
    drop(out);
    let served = server.serve(&STOP);
    eprintln!("tfbench load: stopped after {served} completed request(s)");
    Ok(Outcome::Success)
}

/// The server's streamed token ids of the last run's first `--check`
/// completed requests against the model runtime's one-request greedy
/// generation with exact f32 activations, on a `--kv-cache` cache (`None` where the server sent no
/// ids, as llama-server does not, or `--check 0`). The model is built here
/// from the same --model file or --preset and --seed as the server's.
pub(super) fn server_tokens(
    a: &LoadArgs,
    s: &Settings,
    setup: &Setup,
    last: &Run,
) -> Result<Option<TokenCheck>> {
    let done: Vec<_> = last
        .log
        .queries
        .iter()
        .filter(|q| q.ok() && !q.token_ids.is_empty())
        .take(a.check as usize)
        .collect();
    if done.is_empty() {
        return Ok(None);
    }
    let tok = setup.tokenizer.as_deref().map(|t| t as &dyn Tokenize);
    let reqs = done.iter().map(|q| s.workload.request(q.id, tok, setup.vocab)).collect::<Result<Vec<_>>>()?;
    let positions = s.workload.max_positions();
    let mut model = match &a.model {
        Some(p) => {
            let (src, info) = crate::model::open(p).map_err(|e| anyhow::anyhow!("--model: {e:#}"))?;
            src.load(&info, positions).with_context(|| format!("--model {}", p.display()))?
        }
        None => {
            let cfg = ModelConfig::preset(&a.preset)?;
            let dtype = crate::model::linear::DType::parse(&a.dtype)
                .ok_or_else(|| anyhow::anyhow!("--dtype {}: unknown", a.dtype))?;
            crate::model::weights::random_model(&cfg, dtype, a.seed)?
        }
    };
    if model.cfg.vocab != setup.vocab {
        return Ok(None);
    }
    model.set_int8_activations(false);
    let pairs: Vec<(&[u32], &[u32])> =
        reqs.iter().zip(&done).map(|(r, q)| (&r.ids[..], &q.token_ids[..])).collect();
    let threads = a.threads.map_or_else(crate::backend::cpu::run_threads, |t| t as usize);
    let ctx = crate::backend::cpu::Context::new(crate::backend::cpu::Threads::Exactly(threads))?;
    let kv = super::imp::kv_storage(a);
    Ok(Some(ctx.install(|| compare_tokens(&model, kv, &pairs))))
}
