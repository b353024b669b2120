//! The machines section: results of several machines side by side, with
//! speeds normalised by each machine's probed limits and the cost of a
//! million tokens where prices are given ([`crate::report::machines`]
//! computes it; the Markdown form is there too).

use super::svg::Esc;
use crate::report::machines::{Machines, time};
use std::fmt::Write as _;

fn num(v: Option<f64>, digits: usize) -> String {
    v.map_or("-".into(), |x| format!("{x:.digits$}"))
}

/// `<section id="machines">`.
pub(crate) fn section(out: &mut String, m: &Machines) {
    out.push_str(
        "<section id=\"machines\"><h2>Machines</h2><p class=\"muted\">Speed: the first machine's median \
         time over this one's (above 1: faster). Normalised: that speed over the ratio of the machines' \
         probed limits (FMA peak for FLOP-counting cases, STREAM triad bandwidth for the others): near 1 \
         when the machines differ by their limits alone. Cost: the price per hour over the tokens a case \
         produces per second.</p><div class=\"scroll\"><table class=\"summary\"><tr><th>#</th>\
         <th>results</th><th>CPU</th><th>threads</th><th>FMA peak</th><th>triad</th><th>price per hour</th></tr>",
    );
    for (i, x) in m.machines.iter().enumerate() {
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
             <td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
            i + 1,
            Esc(&x.label),
            Esc(&x.cpu),
            x.threads,
            x.peak_flops.map_or("not probed".into(), |v| format!("{:.1} GFLOP/s", v / 1e9)),
            x.triad.map_or("not probed".into(), |v| format!("{:.1} GB/s", v / 1e9)),
            Esc(&x.price.as_ref().map_or("-".into(), |p| format!("{} {}", p.per_hour, p.currency))),
        );
    }
    out.push_str("</table></div>");
    if let Some((cur, n)) = &m.ranking_basis {
        let _ = write!(
            out,
            "<h3>Ranked by {} per million tokens</h3><p class=\"muted\">Geometric mean over the {n} \
             token-counting case(s) every priced machine passed.</p><table><tr><th>rank</th>\
             <th>machine</th><th>per million tokens</th></tr>",
            Esc(cur)
        );
        for (r, (i, v)) in m.ranking.iter().enumerate() {
            let _ = write!(
                out,
                "<tr><td>{}</td><td>{} ({})</td><td class=\"num\">{v:.4} {}</td></tr>",
                r + 1,
                i + 1,
                Esc(&m.machines[*i].label),
                Esc(cur)
            );
        }
        out.push_str("</table>");
    }
    for u in &m.unranked {
        let _ = write!(out, "<p class=\"warn\">Not ranked: {}</p>", Esc(u));
    }
    out.push_str("<div class=\"scroll\"><table class=\"side\"><tr><th>case</th>");
    for i in 0..m.machines.len() {
        let _ = write!(out, "<th>{}: median, speed, normalised, cost</th>", i + 1);
    }
    out.push_str("</tr>");
    for (id, row) in &m.cases {
        let _ = write!(out, "<tr><td class=\"id\">{}</td>", super::labels::id_html(id));
        for (i, c) in row.iter().enumerate() {
            match c {
                None => out.push_str("<td class=\"num\">-</td>"),
                Some(c) => {
                    let cur = m.machines[i].price.as_ref().map_or("", |p| p.currency.as_str());
                    let cost = c.per_mtok.map_or(String::new(), |p| format!(", {p:.4} {cur}/Mtok"));
                    let _ = write!(
                        out,
                        "<td class=\"num\">{}, x{}, n{}{}</td>",
                        Esc(&time(c.median_s)),
                        num(c.speed, 2),
                        num(c.normalised, 2),
                        Esc(&cost)
                    );
                }
            }
        }
        out.push_str("</tr>");
    }
    out.push_str("</table></div></section>");
}
