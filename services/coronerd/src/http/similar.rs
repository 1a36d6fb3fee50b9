//! The "similar past incidents" section of a job's page: whether this failure is new, and the
//! earlier jobs that failed the same way (linked), with where they ran.

use super::escape;
use coroner_model::Report;

pub fn render(r: &Report, out: &mut String) {
    let Some(s) = &r.similar_incidents else { return };
    out.push_str("<h2>Similar past incidents</h2>");
    if s.same + s.close == 0 {
        out.push_str(&format!(
            "<p id=\"similar\" class=\"muted\">None: this failure is new (signature <code>{}</code>: <code>{}</code>).</p>",
            escape(&s.signature),
            escape(&s.template)
        ));
        return;
    }
    let hosts: Vec<String> = s.hosts.iter().map(|h| format!("{} ({})", escape(&h.host), h.count)).collect();
    out.push_str(&format!(
        "<p id=\"similar\"><b>{}</b> earlier job{} with the same signature, <b>{}</b> close, from {} to {}{}. Signature <code>{}</code>: <code>{}</code></p>",
        s.same,
        if s.same == 1 { "" } else { "s" },
        s.close,
        escape(s.first_seen.as_deref().unwrap_or("-")),
        escape(s.last_seen.as_deref().unwrap_or("-")),
        if hosts.is_empty() { String::new() } else { format!(", on {}", hosts.join(", ")) },
        escape(&s.signature),
        escape(&s.template)
    ));
    out.push_str("<table id=\"similar-jobs\"><tr><th>job</th><th>recorded</th><th>class</th><th>rank</th><th>host</th><th>GPU</th><th>match</th></tr>");
    for j in &s.jobs {
        let id = escape(&j.job_id);
        out.push_str(&format!(
            "<tr><td><a href=\"/jobs/{id}\">{id}</a></td><td class=\"nowrap\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(&j.time),
            j.class,
            j.rank.map(|r| r.to_string()).unwrap_or_else(|| "-".into()),
            escape(j.host.as_deref().unwrap_or("-")),
            escape(j.gpu.as_deref().unwrap_or("-")),
            if j.same { "same".to_string() } else { format!("close ({:.2})", j.similarity) }
        ));
    }
    out.push_str("</table>");
}
