"""`lazyviz report --format markdown`: the findings and the run at a glance, to paste
into an issue or a pull request."""
from __future__ import annotations

from lazyviz.analysis.run import Run
from lazyviz.export import Renderer, RenderOptions
from lazyviz.present import CLEAN_RUN, short_path, site_text


def _cell(text: str) -> str:
    """Markdown table cells: no pipes or newlines from the trace break the table."""
    return text.replace("|", "\\|").replace("\n", " ")


class MarkdownRenderer(Renderer):
    name = "markdown"

    def render(self, recorded: Run, options: RenderOptions) -> str:
        run, analysis = recorded.info, recorded.analysis
        summary = analysis.summary
        lines = [f"### lazyviz: `{_cell(run.command)}`", "",
                 f"{run.backend} backend, capture {run.capture}, torch {run.versions.get('torch', '?')}: "
                 f"{_cell(run.state)}", ""]
        lines.append("**Findings**" if analysis.findings else f"**No findings**: {CLEAN_RUN}")
        lines.append("")
        for finding in analysis.findings:
            where = f" at `{_cell(site_text(finding.frame, run.cwd))}`" if finding.frame else ""
            lines.append(f"- **{finding.severity}** {_cell(finding.message)}{where}")
            if finding.fix:
                lines.append(f"  - fix: {_cell(finding.fix)}")
        steps = f"{summary.steps} steps" if summary.steps else "no `mark_step()`"
        lines += ["", f"{summary.executions} executions, {steps}, {summary.graphs} distinct graphs, "
                      f"{summary.misses} cache misses, sync {summary.sync_ms:.1f} ms", "",
                  "| sync site | executions | causes | sync ms |", "|---|---:|---|---:|"]
        for site in summary.sites[:10]:
            causes = ", ".join(f"{c} {n}" for c, n in site.causes.items())
            lines.append(f"| `{_cell(short_path(site.site, run.cwd))}` | {site.executions} | {causes} | {site.total_ms:.1f} |")
        return "\n".join(lines) + "\n"
