"""`lazyviz fix`: the edits that fix a trace's findings, as a unified diff on stdout
(what each does, and the findings to change by hand, on stderr); `--try` measures the
patch on a copy, `--write` applies it to the user's files when they are unchanged;
`--patch` measures the user's own edit the same way, in place of lazyviz's."""
from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path

from lazyviz.analysis.run import Run
from lazyviz.commands.base import CliError, open_trace, regular_file, say, step_count
from lazyviz.fix.patch import PatchError, edited_copy, is_diff, patched_texts
from lazyviz.fix.proposals import (
    Change,
    Proposal,
    Source,
    apply_changes,
    diff_texts,
    propose,
    read_texts,
    unified_diff,
)
from lazyviz.fix.rounds import RoundEdits, round_edits, until_clean
from lazyviz.fix.trial import (
    DEFAULT_STEPS,
    Bound,
    Measures,
    crash_verdict,
    shown_again_by,
    trial_bound,
    trial_record,
    try_patch,
)
from lazyviz.fix.workspace import copy_root
from lazyviz.fix.write import WriteRefused, write_patched
from lazyviz.present import KIND_LABELS
from lazyviz.trace.files import add_run_fields
from lazyviz.trace.model import RunInfo, TrialRecord


class FixCommand:
    """Propose the edits that fix the findings (a unified diff); --try measures them on a copy."""

    name = "fix"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("trace", help="a trace file recorded by lazyviz run")
        parser.add_argument("--try", dest="trial", action="store_true",
                            help="apply the edits to a copy of the script's folder (never your files), run the "
                                 "original and the patched copy traced, and compare them")
        parser.add_argument("--steps", type=step_count, default=None, metavar="N",
                            help=f"with --try, stop each run after N steps (default: {DEFAULT_STEPS}, a few past "
                                 "warm-up, or two past the last step a fixed finding was seen in)")
        parser.add_argument("--timeout", type=float, default=None, metavar="S",
                            help="with --try, give up on a run after S seconds")
        parser.add_argument("--keep", action="store_true", help="with --try, keep the copies and their traces")
        parser.add_argument("--write", action="store_true",
                            help="apply the edits to your files (only files unchanged since the trace was recorded)")
        parser.add_argument("--until-clean", action="store_true",
                            help="with --try, round after round: apply the edits, run, take the new findings' "
                                 "edits, until none is left or a round makes things worse or changes the output")
        parser.add_argument("--rounds", type=step_count, default=5, metavar="K",
                            help="with --until-clean, at most K rounds (default: 5)")
        parser.add_argument("--patch", metavar="FILE",
                            help="with --try, prove your own edit instead of lazyviz's: a unified diff (git diff, "
                                 "diff -u) of files in the script's folder, or a copy of one of them edited by hand")

    def run(self, options: argparse.Namespace) -> int:
        if options.patch is not None and options.until_clean:
            raise CliError("--patch proves your edit, --until-clean lazyviz's round after round: one at a time")
        regular_file(options.trace, "trace")
        with open_trace(options.trace) as trace:
            run = Run(trace).analysed()
            info = run.info
            if options.trial and info.source != "script":
                raise CliError(f"--try: {options.trace} was recorded from Python ({info.source}), not by "
                               "`lazyviz run`, so there is no script to re-run; the diff stands without it")
            proposals = propose(run)
        if options.patch is not None:
            return self._prove_patch(options, run, proposals)
        changed = [p.stale for p in proposals if p.stale]
        self._describe(proposals)
        if changed and options.write:
            raise CliError(f"--write: {changed[0]} changed since the trace was recorded: run it again")
        changes = [c for p in proposals for c in p.changes]
        if not changes:
            if options.trial and proposals:  # never a trial that silently tried nothing
                say("lazyviz: --try: no edit to try; each finding above is to change by hand")
            return 0
        texts = read_texts(c.file for c in changes)  # line endings kept; "" for a file an edit makes
        if options.until_clean:
            return self._until_clean(options, run, proposals, texts)
        print(unified_diff(texts, changes, info.cwd), end="", flush=True)
        if options.trial:
            bound = self._bound(run, proposals, options.steps)
            say(f"lazyviz: trying the edits on a copy, {bound} each side (the original, then the patched copy)...")
            expected = [p.alters_results for p in proposals if p.alters_results]
            text, before, after, checked = try_patch(info, apply_changes(texts, changes), bound, options.timeout,
                                                     options.keep, expected, texts, len(run.executions))
            say(text)
            self._keep(options.trace, info, trial_record(before, after, bound,
                                                         [p.summary for p in proposals if p.changes], checked))
            if not self._ended_alike(before, after):
                return 1
        if options.write:
            self._write(changes, texts, info.sources)
        return 0

    def _until_clean(self, options: argparse.Namespace, run: Run, proposals: list[Proposal],
                     texts: dict[str, str]) -> int:
        """--try --until-clean: round after round to a clean run; one table; the diff of
        every kept round's edits on stdout (and with --write, in the user's files)."""
        if not options.trial:
            raise CliError("--until-clean runs the edits round after round: add --try")
        info = run.info
        bound = self._bound(run, proposals, options.steps)

        def next_round(kept: Run, read: Callable[[str], Source | None]) -> RoundEdits | None:
            return round_edits(propose(kept, read))

        first = round_edits(proposals)
        assert first is not None and first.patched
        say(f"lazyviz: round after round on copies (at most {options.rounds}), {bound} each run...")
        table, before, rounds, final = until_clean(info, texts, first, bound, options.timeout, options.rounds,
                                                    options.keep, next_round, len(run.executions))
        say(table)
        originals = read_texts(final)
        print(diff_texts(originals, final, info.cwd), end="", flush=True)
        kept = [r for r in rounds if r.kept]
        if kept:
            self._keep(options.trace, info, trial_record(before, kept[-1].measures, bound,
                                                         [e for r in kept for e in r.edits]))
        if options.write and kept:
            self._write_texts({f: t for f, t in final.items() if t != originals[f]}, info.sources)
        return 0 if kept or not rounds else 1

    def _prove_patch(self, options: argparse.Namespace, run: Run, proposals: list[Proposal]) -> int:
        """--try --patch: the user's edit, measured as lazyviz's own would be."""
        if not options.trial:
            raise CliError("--patch proves an edit by running it: add --try")
        if options.write:
            raise CliError("--write applies lazyviz's edits; --patch proves yours, which you apply yourself")
        info = run.info
        source = regular_file(options.patch, "patch")
        try:
            text = source.read_bytes().decode("utf-8")
        except UnicodeDecodeError:
            raise CliError(f"--patch: {options.patch} is not UTF-8 text") from None
        folder = copy_root(info, [])
        try:
            if is_diff(text):
                patched = patched_texts(text, Path(info.cwd), folder, lambda path: path.read_bytes().decode("utf-8"))
            else:
                patched = {edited_copy(source, folder): text}
        except (PatchError, OSError, UnicodeDecodeError) as error:
            raise CliError(f"--patch: {error}") from None
        originals = {file: Path(file).read_bytes().decode("utf-8") if Path(file).exists() else "" for file in patched}
        if all(patched[file] == originals[file] for file in patched):
            raise CliError(f"--patch: {options.patch} changes nothing in {folder}")
        say(f"lazyviz: {len(proposals)} finding{'s' if len(proposals) != 1 else ''} in the trace"
            + "".join(f"\n  {n}. {p.finding.severity}: {(p.finding.short or p.finding.message)[:160]}"
                      for n, p in enumerate(proposals, 1)))
        print(diff_texts(originals, patched, info.cwd), end="", flush=True)  # the edit as applied, as lazyviz prints its own
        bound = trial_bound(run, [e for p in proposals for e in shown_again_by(p.finding, run)], options.steps)
        say(f"lazyviz: trying your patch on a copy, {bound} each side (the original, then the patched copy)...")
        result, before, after, checked = try_patch(info, patched, bound, options.timeout, options.keep,
                                                   originals=originals, recorded_executions=len(run.executions))
        say(result)
        self._keep(options.trace, info, trial_record(before, after, bound, [f"your patch ({source.name})"], checked))
        return 0 if self._ended_alike(before, after) else 1

    @staticmethod
    def _keep(trace: str, info: RunInfo, record: TrialRecord) -> None:
        """The measurement kept with the run: the HTML report and the notebook summary show it."""
        if info.finished:
            problem = add_run_fields(Path(trace), {"fix_trial": json.dumps(record.to_json())})
            if problem:
                say(f"lazyviz: could not keep the measurement in the trace: {problem}")

    @staticmethod
    def _ended_alike(before: Measures, after: Measures) -> bool:
        """Did the copy end as the original did, or run on where it crashed? (said in the table)"""
        return crash_verdict(before, after)[0]

    @staticmethod
    def _bound(run: Run, proposals: list[Proposal], steps: int | None) -> Bound:
        """Enough to see each fixed finding again (a last short batch is late)."""
        return trial_bound(run, [e for p in proposals if p.mechanical for e in shown_again_by(p.finding, run)], steps)

    @staticmethod
    def _describe(proposals: list[Proposal]) -> None:
        if not proposals:
            say("lazyviz: no findings: nothing to fix")
            return
        edits = sum(p.mechanical for p in proposals)
        say(f"lazyviz: {len(proposals)} finding{'s' if len(proposals) != 1 else ''}, {edits} with an edit below"
            + (f", {len(proposals) - edits} to change by hand" if edits < len(proposals) else ""))
        number = 0
        while number < len(proposals):
            proposal, finding = proposals[number], proposals[number].finding
            # Findings an earlier edit fixes, one after another at one site: one line.
            run_end = number + 1
            while run_end < len(proposals) and proposal.same_as is not None and \
                    proposals[run_end].same_as == proposal.same_as and proposals[run_end].finding.frame == finding.frame:
                run_end += 1
            where = f" [{finding.frame.site.rpartition('/')[2]}]" if finding.frame else ""
            if run_end - number > 1:
                label = KIND_LABELS.get(finding.kind, finding.kind)
                say(f"  {number + 1}-{run_end}. {finding.severity}: {run_end - number} {label} findings{where}: "
                    f"the same edit as {proposal.same_as + 1}")
            elif proposal.same_as is not None:
                say(f"  {number + 1}. {finding.severity}: {(finding.short or finding.message)[:160]}{where}")
                say(f"     edit: the same as {proposal.same_as + 1}")
            else:
                say(f"  {number + 1}. {finding.severity}: {(finding.short or finding.message)[:160]}{where}")
                say(f"     {'edit' if proposal.mechanical else 'by hand'}: {proposal.summary}")
            number = run_end

    @staticmethod
    def _write(changes: list[Change], texts: dict[str, str], hashes: dict[str, str]) -> None:
        FixCommand._write_texts(apply_changes(texts, changes), hashes)

    @staticmethod
    def _write_texts(patched: dict[str, str], hashes: dict[str, str]) -> None:
        try:
            written = write_patched(patched, hashes)
        except WriteRefused as error:
            raise CliError(f"--write: {error}") from None
        for file in written:
            say(f"lazyviz: wrote {file}")
