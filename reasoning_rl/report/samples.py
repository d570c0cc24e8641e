"""The report's "Samples" section: each step's best, worst and errored samples from ``RUN_DIR/samples/``,
with a search box that filters them in the browser (the page stays one self-contained file)."""

from __future__ import annotations

from html import escape
from pathlib import Path

from reasoning_rl.samples import COLUMNS, cells, pick, read_step_files

PER_STEP = 6

_SCRIPT = """<script>
function rrlSampleSearch(q){q=q.toLowerCase();var shown=0;
document.querySelectorAll('tr.sample').forEach(function(r){var ok=!q||r.textContent.toLowerCase().indexOf(q)>=0;
r.style.display=ok?'':'none';if(ok)shown++;});
document.querySelectorAll('details.samples-step').forEach(function(d){var any=false;
d.querySelectorAll('tr.sample').forEach(function(r){if(r.style.display!=='none')any=true;});
d.style.display=any?'':'none';if(q)d.open=any;});
document.getElementById('sample-count').textContent=shown+' shown';}
</script>"""

_CSS = (
    "<style>.samples td{text-align:left;vertical-align:top;white-space:pre-wrap;max-width:420px;"
    "font-size:12px}.samples td.v-correct{color:#1a7f37}.samples td.v-incorrect{color:#b42318}"
    ".samples td.v-error{color:#9a6700}</style>"
)


def samples_section(run_dir: Path) -> str:
    by_step = read_step_files(run_dir)
    if not by_step:
        return (
            "<h2>Samples</h2><p class='muted'>No samples/ in this run (logging.samples=false, or no step "
            "finished).</p>"
        )
    head = "".join(f"<th>{escape(c)}</th>" for c in COLUMNS)
    steps = []
    last = max(by_step)
    for step, rows in by_step.items():
        body = []
        for kind, row in pick(rows, PER_STEP):
            tds = "".join(
                f'<td class="v-{escape(text)}">{escape(text)}</td>'
                if col == "verdict"
                else f"<td>{escape(text)}</td>"
                for col, text in zip(COLUMNS, cells(kind, row), strict=True)
            )
            body.append(f'<tr class="sample">{tds}</tr>')
        errors = sum(r.get("verdict") == "error" for r in rows)
        summary = f"step {step}: {len(rows)} samples, {errors} errored"
        steps.append(
            f'<details class="samples-step"{" open" if step == last else ""}><summary>{escape(summary)}'
            f'</summary><table class="samples"><tr>{head}</tr>{"".join(body)}</table></details>'
        )
    search = (
        '<p><input id="sample-search" type="search" placeholder="search prompts, responses, reasons…" '
        'oninput="rrlSampleSearch(this.value)" size="50"> <span id="sample-count" class="muted"></span></p>'
    )
    intro = (
        f"<p class='muted'>Per step: the best, worst and errored samples in turn (up to {PER_STEP}); every "
        "sample is in RUN_DIR/samples/step_N.jsonl.</p>"
    )
    return "<h2>Samples</h2>" + _CSS + intro + search + "".join(steps) + _SCRIPT
