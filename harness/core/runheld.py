"""The fields of a run's fingerprint.json and run.json that its records can refute, each held to them.

Each document's fields are checked on their own where it is read (``harness.core.fingerprintfile``,
``harness.core.runmeta``); what only the records can say is checked here, once the run is read
whole (``harness.core.store.run_of``): the fingerprint's world and backend, and the options run.json
keeps of the command that made the run, and the fingerprint's launch, which says which world rule
holds and must be one the writer of the directory's run.json gives. Acceptance pins the
fingerprint's world and backend, and the report prints the options, so a field edited to contradict
the records is refused naming its file and field rather than passed or printed.

The options say what ``critpath run`` was asked for (``harness.run.plan.RunOptions``); what each can
be held to follows from how the plan reads it:

- ``backend``: every case runs over the plan's one backend, which is --backend where given;
- ``world``: in a joined job (torchrun, Slurm) --world must be the job's world; in a local run of
  named cases the cases name their own worlds, and the world given (acceptance passes its profile's)
  is their widest, the world the fingerprint records. In a local run of --families it shapes the
  grid, whose cases of fixed worlds this release's grid can no longer tell for an older run: it is
  held to its bounds alone;
- ``case_ids``: the named cases are the run's planned cases (as many as ``cases_total``), and every
  record is of one of them, compared in today's spelling of each (``registry.canonical_id``);
- ``families``: without named cases, every record is of a family named.

A run is read with this module's functions as a ``LoadedRun`` (records, meta, fingerprint,
incomplete); each returns why the field contradicts the run, "" when it does not.
"""
from __future__ import annotations

from pathlib import PurePath
from typing import Callable, Mapping, Optional

from harness.core import registry
from harness.core.case import CaseIdError
from harness.core.echo import shown
from harness.core.fingerprintfile import IMPORTED, JOINED, LOCAL, WORKER
from harness.core.imported import problems_of, trailer_contradiction
from harness.core.runmeta import PLANNED, is_import, planned_digest

# One job whose every case runs on all its ranks: no record holds a world other than the job's. A
# local run's cases each spawn their own ranks, and critpath run before its RunPlan wrote --world
# (2) however wide a case (4): there a narrower fingerprint is how such runs read, and so is a
# worker's, its own process's one rank (harness.core.fingerprintfile.WORKER_WORLD) whatever the
# worlds of its rounds' cases.
_ONE_JOB_LAUNCHES = (JOINED, IMPORTED)
# The launches beside each writer's run.json: ``critpath run``'s, local or joined, and an import's.
# A worker writes no run.json (its directory holds its fingerprint and its rounds), so its launch
# beside one is a fingerprint from elsewhere, and would hold the world to a rule not the run's.
_RUN_LAUNCHES, _IMPORT_LAUNCHES = (LOCAL, JOINED), (IMPORTED,)


def fingerprint_launch(run) -> str:
    """Why the fingerprint's launch is not one the writer of the run's run.json gives."""
    launch = run.fingerprint.get("launch")
    if launch is None or not run.meta:
        return ""
    imported = is_import(run.meta)
    if launch not in (_IMPORT_LAUNCHES if imported else _RUN_LAUNCHES):
        writer, launches = ("an import", _IMPORT_LAUNCHES) if imported else ("a critpath run", _RUN_LAUNCHES)
        return (f"{shown(launch)}, but run.json is {writer}'s, whose launch is {' or '.join(map(repr, launches))}"
                f"{'; a worker writes no run.json' if launch == WORKER else ''}")
    return ""


def fingerprint_world(run) -> str:
    """Why the fingerprint's world cannot be the run's. Diagnosis and acceptance read it as the
    job's: a whole run holds a case of that many ranks (a world wider than every record, even
    2**63-1, passed as healthy), and a joined or imported one no other."""
    world = run.fingerprint.get("world")
    if world is None or not run.records:
        return ""
    widest = max(run.records, key=lambda r: r.world)
    one_job = run.fingerprint.get("launch") in _ONE_JOB_LAUNCHES
    if widest.world < world and not run.incomplete:
        return f"{world} ranks, but the widest of the run's records is world {widest.world} ({widest.case_id})"
    if one_job and any(r.world != world for r in run.records):
        other = next(r for r in run.records if r.world != world)
        return f"{world} ranks, but a record of this one job is world {other.world} ({other.case_id})"
    return ""


def _other_backend(run, backend: Optional[str]) -> str:
    """Why ``backend`` is not the run's: every record of a run (and of a worker's rounds) ran over its
    plan's one backend, the one its fingerprint records."""
    if backend is None:
        return ""
    other = next((r for r in run.records if r.backend != backend), None)
    if other is not None:
        return f"{shown(backend)}, but the record of {other.case_id} ran over {other.backend!r}"
    return ""


def fingerprint_backend(run) -> str:
    return _other_backend(run, run.fingerprint.get("backend"))


def options_backend(run) -> str:
    backend = _options(run).get("backend")
    said = run.fingerprint.get("backend")
    if backend is not None and said is not None and backend != said:
        return f"{shown(backend)}, but the run's fingerprint says it ran over {said!r}"
    return _other_backend(run, backend)


def _options(run) -> dict:
    options = run.meta.get("options")
    return options if isinstance(options, dict) else {}


def _named_cases(run) -> dict:
    """Today's spelling of each case ``options.case_ids`` names -> its world, or -> why it names none
    (an ID as it was given, kept where this critpath parses it to no case)."""
    named: dict = {}
    for case_id in _options(run).get("case_ids") or ():
        try:
            case = registry.parse(case_id)
        except (CaseIdError, KeyError) as exc:
            named.setdefault(case_id, str(exc.args[0] if exc.args else exc))
            continue
        named.setdefault(case.id, case.world)
    return named


def options_world(run) -> str:
    world = _options(run).get("world")
    if world is None:
        return ""
    launch = run.fingerprint.get("launch")
    if launch == JOINED and run.fingerprint.get("world") not in (None, world):
        return f"{world}, but the run's fingerprint says its job is {run.fingerprint['world']} ranks, which --world must be"
    worlds = [w for w in _named_cases(run).values() if isinstance(w, int)]
    if launch != JOINED and worlds and max(worlds) != world:
        return (f"{world}, but the widest of the cases it names (field options.case_ids) is world {max(worlds)}, "
                "the world of a run of named cases")
    return ""


def _not_the_planned(run) -> bool:
    """Whether the records are as many as run.json planned but not the cases its digest names: then
    they, not the options, are what is in question, and the run is not whole (``store.incompleteness``)."""
    total, planned = run.meta.get("cases_total"), run.meta.get(PLANNED)
    return (planned is not None and len(run.records) == total
            and planned != planned_digest(r.case_id for r in run.records))


def options_case_ids(run) -> str:
    named = _named_cases(run)
    if not named:
        return ""
    total = run.meta.get("cases_total")
    # a total that is no count (0, -1, absent) leaves the run not whole, which store.incompleteness says
    if isinstance(total, int) and not isinstance(total, bool) and total >= 1 and len(named) != total:
        return f"{len(named)} cases, but field cases_total says the run planned {total}"
    unknown = next((case_id for case_id, world in named.items() if not isinstance(world, int)), None)
    if unknown is not None:
        return f"names no case: {named[unknown]}"  # the reason quotes the ID
    if _not_the_planned(run):
        return ""
    # a record's ID as it was written is today's spelling of its case but for a run before one held
    other = next((r for r in run.records if r.case_id not in named and registry.canonical_id(r.case_id) not in named),
                 None)
    if other is not None:
        return f"names {len(named)} case(s), and not {other.case_id}, which the run holds a record of"
    return ""


def options_families(run) -> str:
    families = _options(run).get("families")
    if not families or _options(run).get("case_ids"):
        return ""
    other = next((r for r in run.records if r.family not in families), None)
    if other is not None:
        return f"{', '.join(map(shown, families))}, and not {other.family!r}, whose case {other.case_id} the run holds"
    return ""


def _blocks(run) -> list[Mapping]:
    """Every record's imported row (``extra.imported``) when the run is an import whose records
    are all there, as its run.json counts them; [] otherwise: the rows of a cut import are not the
    log's, and how far it got is ``store.incompleteness``'s to say."""
    meta, records = run.meta, run.records
    if not records or not is_import(meta) or meta.get("state") != "imported" or meta.get("cases_total") != len(records):
        return []
    blocks = [r.extra.get("imported") if isinstance(r.extra, Mapping) else None for r in records]
    return blocks if all(isinstance(b, Mapping) for b in blocks) else []


def records_trailer(run) -> str:
    """Why the trailer the import's records keep is not what their rows give: the importer's
    checks of the trailer against the rows (``harness.core.imported``), redone on the records."""
    blocks = _blocks(run)
    return (trailer_contradiction(blocks) or "") if blocks else ""


def _line_number(where) -> Optional[int]:
    text = str(where)
    return int(text[5:]) if text.startswith("line ") and text[5:].isdigit() else None


def records_where(run) -> str:
    """Why where the records say their rows are is not a table's: one row a line, in the log's
    order, before the trailer's lines (a text log) and each row once."""
    blocks = _blocks(run)
    seen: dict = {}
    for block in blocks:
        where = block.get("where")
        if where in seen:
            return f"field extra.imported.where: {shown(where)} is the row of two records; each row is one record"
        seen[where] = block
    if not blocks or blocks[0].get("format") != "text":
        return ""
    trailer = blocks[0].get("trailer") if isinstance(blocks[0].get("trailer"), Mapping) else {}
    after = [n for key in ("out_of_bounds_where", "avg_busbw_where") if (n := _line_number(trailer.get(key)))]
    last = 0
    for block in blocks:
        line = _line_number(block.get("where"))
        if line is None or line <= last or any(line >= n for n in after):
            return (f"field extra.imported.where: {shown(block.get('where'))}, but the rows of a text log are on "
                    f"lines after {last} and before its trailer (lines {', '.join(map(str, after)) or 'none'}), "
                    "one record a row, in the log's order")
        last = line
    return ""


def meta_contradicted(run) -> str:
    """Why run.json's ``contradicted`` is not what the trailer the records keep says of their rows."""
    blocks = _blocks(run)
    if not blocks:
        return ""
    said, held = run.meta.get("contradicted") or "", problems_of(blocks)
    if said != held:
        return (f"{shown(said) if said else 'absent'}, but the trailer its records keep says "
                f"{shown(held) if held else 'that it agrees with the rows'}")
    return ""


def _one_import_field(run, field: str, of_block: Callable[[Mapping], object]) -> str:
    blocks = _blocks(run)
    if not blocks or field not in run.meta:
        return ""
    other = next((b for b in blocks if of_block(b) != run.meta[field]), None)
    if other is not None:
        return f"{shown(run.meta[field])}, but the record of {shown(other.get('where'))} says {shown(of_block(other))}"
    return ""


def meta_ranks(run) -> str:
    return _one_import_field(run, "ranks", lambda b: b.get("ranks"))


def meta_trailer(run) -> str:
    return _one_import_field(run, "trailer", lambda b: b.get("trailer"))


def records_file(run) -> str:
    """Why the log every record cites (``extra.imported.file``, which acceptance names as the
    figure's source) is not the one run.json's ``source`` says the import read."""
    source = run.meta.get("source")
    if not isinstance(source, str):
        return ""
    other = next((b for b in _blocks(run) if b.get("file") != PurePath(source).name), None)
    if other is not None:
        return (f"field extra.imported.file: {shown(other.get('file'))} (the record of {shown(other.get('where'))}), "
                f"but run.json says the import read {shown(source)}")
    return ""


# The run's documents, as LoadedRun holds them (the store names their files).
FINGERPRINT, META, RESULTS = "fingerprint", "meta", "results"
# (the document, its field, why the run's records refute it): in the order a reader is told, an
# import's records against the trailer they keep first (a row edited in them is what is wrong, not
# the run.json that still says the log's figures; the why names the records' field, so the field
# here is ""), then run.json's fields an import's records give, the fingerprint (acceptance pins
# it; its launch before the world its rule is read by), then run.json's options.
HELD: tuple[tuple[str, str, Callable[..., str]], ...] = (
    (RESULTS, "", records_trailer),
    (RESULTS, "", records_where),
    (RESULTS, "", records_file),
    (META, "contradicted", meta_contradicted),
    (META, "ranks", meta_ranks),
    (META, "trailer", meta_trailer),
    (FINGERPRINT, "launch", fingerprint_launch),
    (FINGERPRINT, "world", fingerprint_world),
    (FINGERPRINT, "backend", fingerprint_backend),
    (META, "options.backend", options_backend),
    (META, "options.case_ids", options_case_ids),
    (META, "options.world", options_world),
    (META, "options.families", options_families),
)


def contradiction(run) -> Optional[tuple[str, str, str]]:
    """(document, field, why) of the first field of ``run``'s documents its records refute, or None."""
    for name, field, check in HELD:
        why = check(run)
        if why:
            return name, field, why
    return None
