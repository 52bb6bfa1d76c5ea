"""`capgeo dupes DATA`, `capgeo dupes-examples DATA` and `capgeo dupes-sets DATA`: near-duplicate
captions (pairs, example queries, sets), with the words they share highlighted."""

from __future__ import annotations

import os
import sys

import click

from capgeo._atomic import is_standard_output, refuse_redirected_to_a_file
from capgeo import terminal
from capgeo.cli.examples import epilog
from capgeo.cli.options import (
    FiniteFloatRange,
    PairThreshold,
    dataset_options,
    encode_from_options,
    encoder_options,
    json_option,
    load_from_options,
    ray_option,
    refuse_path_clashes,
    seed_option,
    writable_output,
)
from capgeo.cli.pass_options import block_size_option
from capgeo.defaults import DUPES_NEIGHBOURS, DUPES_PER_QUANTILE, DUPES_QUANTILES, DUPES_TOP, KEEP_POLICIES, TOP_K
from capgeo.defaults import NEAR_DUPLICATE_THRESHOLD as DEFAULT_NEAR_DUPLICATE_THRESHOLD
from capgeo.errors import CapgeoError
from capgeo.progress import counts_passes
# the renderer lives in the terminal layer; its names stay importable here (capgeo.cli.leak marks words with them)
from capgeo.terminal.dupes import (DIFFERING_MARKS, DIFFERING_STYLE, SHARED_MARKS, SHARED_STYLE,  # noqa: F401
                                   highlighted, is_plain, legend, render)

OUTPUT_FORMATS = ("text", "jsonl", "csv", "parquet")


#: row formats an output file's suffix names
ROW_SUFFIXES = {".jsonl": "jsonl", ".csv": "csv", ".parquet": "parquet"}


def _common_options(command):
    """What the three near-duplicate commands share: the dataset and encoder, the pass, the outputs."""
    for option in reversed((
        dataset_options,
        encoder_options,
        click.option("--top-k", type=click.IntRange(min=1), default=TOP_K, show_default=True,
                     help="Companions kept per caption in the scan; crowded captions are re-searched exactly."),
        block_size_option,
        click.option("--output-format", "output_format", type=click.Choice(OUTPUT_FORMATS), default=None,
                     help="text (coloured, for reading) or rows for other tools. Default: the rows -o's "
                          "suffix names (.jsonl, .csv, .parquet), else text."),
        click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=str), default=None,
                     callback=writable_output, help="Write to FILE (atomically) instead of stdout."),
        json_option,
        ray_option,
        counts_passes,
    )):
        command = option(command)
    return command


@click.command("dupes", short_help="Near-duplicate caption pairs of different images, shared words marked.",
               epilog=epilog("dupes"))
@click.option("--threshold", type=PairThreshold(), default=None, metavar="T",
              help="Only pairs with cosine >= T.")
@click.option("--top", "top", type=click.IntRange(min=0), default=DUPES_TOP, show_default=True, metavar="N",
              help="List at most N pairs, most similar first; 0 = every pair (>= --threshold).")
@click.option("--skip-exact", is_flag=True,
              help="Leave exact duplicates (same text after case and spacing) out of the pair list, so the "
                   "paraphrases show; the output says how many were skipped.")
@_common_options
def dupes(threshold, top, skip_exact, output_format, output, json_out, **options):
    """The most similar caption pairs of DATA: pairs of different images (groups) whose
    captions embed almost alike, most similar first, with the content words they share in
    one colour and the words only one of them has in another ([shared] and {differs} when
    there is no colour), the word overlap (Jaccard) beside the embedding cosine, and exact
    duplicates flagged. A line above the list states how many pairs in all are
    near-duplicates (cosine >= 0.95, as in every command) and how many are exact copies.

    Captions of one group describe the same image and are never paired.
    Rows (--output-format jsonl/csv/parquet) hold ids, groups, texts, cosine, jaccard,
    shared and differing words and character spans; see `capgeo docs dupes`.
    `capgeo dupes-examples` shows captions at quantiles of the hardest-companion distribution,
    `capgeo dupes-sets` groups near-duplicates into sets.
    """
    _run("pairs", dict(threshold=threshold, top=top, skip_exact=skip_exact, **_pass(options)), output_format, output,
         json_out, options)


@click.command("dupes-examples", short_help="Captions at quantiles of hardest-companion cosine, with their nearest.",
               epilog=epilog("dupes-examples"))
@click.option("--quantile", "quantiles", type=FiniteFloatRange(0.0, 1.0), multiple=True, metavar="Q",
              help="Quantile of hardest-companion cosine (repeatable; default "
                   f"{', '.join(f'{q:g}' for q in DUPES_QUANTILES)}, as in HN-CLIP's figures).")
@click.option("--per-quantile", type=click.IntRange(min=1), default=DUPES_PER_QUANTILE, show_default=True,
              help="Query captions per quantile.")
@click.option("--neighbours", type=click.IntRange(min=1), default=DUPES_NEIGHBOURS, show_default=True,
              help="Nearest other-group captions shown per query.")
@_common_options
def dupes_examples(quantiles, per_quantile, neighbours, output_format, output, json_out, **options):
    """Query captions of DATA whose hardest-companion cosine (their highest cosine with a
    caption of another image) sits at each quantile of that distribution, each with its
    nearest captions of other images, shared and differing words marked as `capgeo dupes`
    marks them. Rows (--output-format jsonl/csv/parquet): one per (query, neighbour);
    see `capgeo docs dupes`.
    """
    from capgeo.findings.duplicates import DEFAULT_QUANTILES

    _run("examples", dict(quantiles=quantiles or DEFAULT_QUANTILES, per_quantile=per_quantile, neighbours=neighbours,
                          **_pass(options)), output_format, output, json_out, options)


@click.command("dupes-sets", short_help="Sets of near-duplicate captions; optionally keep one per set.",
               epilog=epilog("dupes-sets"))
@click.option("--threshold", type=PairThreshold(), default=DEFAULT_NEAR_DUPLICATE_THRESHOLD, show_default=True,
              metavar="T", help="Captions are linked by pairs with cosine >= T.")
@click.option("--keep", type=click.Choice(KEEP_POLICIES), default=None,
              help="Keep one caption per set (first in the data, longest, shortest, or random with --seed) and "
                   "say what dropping the others removes.")
@click.option("--drop-list", type=click.Path(dir_okay=False, path_type=str), default=None, metavar="FILE",
              callback=writable_output,
              help="Write the ids of the captions dropped (by --keep, first by default), one per line, to FILE.")
@seed_option("Seed of --keep random.")
@_common_options
def dupes_sets(threshold, keep, drop_list, seed, output_format, output, json_out, **options):
    """Sets of near-duplicate captions of DATA: connected components of the pairs of different
    images with cosine >= --threshold, largest first, with each set's size and weakest link.
    Sets chain: two members can be far below the threshold when each is close to a third
    (the smallest cosine between two members is shown). With --keep or --drop-list, one
    caption per set is kept and the summary says how many captions and images dropping the
    others removes. Rows (--output-format jsonl/csv/parquet): one per set; see `capgeo docs dupes`.
    """
    policy = keep or ("first" if drop_list is not None else None)
    _run("sets", dict(threshold=threshold, keep=policy, seed=seed, **_pass(options)), output_format, output,
         json_out, options, before_output=lambda section: _write_drop_list(section, drop_list))


def _pass(options: dict) -> dict:
    """Pop the options of the pairwise pass (--top-k, --block-size) that every near-duplicate command takes."""
    return {"top_k": options.pop("top_k"), "block_size": options.pop("block_size")}


def _write_drop_list(section, drop_list: str | None) -> None:
    if drop_list is None:
        return
    from capgeo.findings.leak import write_id_list

    dropped = list(section.dedup.dropped_ids)
    write_id_list(dropped, drop_list)
    click.echo(f"Wrote {drop_list} ({len(dropped):,} caption ids)", err=True)


def _run(kind: str, section_options: dict, output_format: str | None, output: str | None, json_out: str | None,
         options: dict, before_output=None):
    """Load DATA, have the library check, embed and compute the ``kind`` section
    (capgeo.pipeline.dupes_dataset), and write it: the JSON (--json), the drop list, then the text
    or rows (to -o FILE, else stdout, which JSON to stdout keeps to itself)."""
    suffix_format = ROW_SUFFIXES.get(os.path.splitext(output)[1].lower()) if output else None
    output_format = output_format or suffix_format or "text"
    if output_format == "parquet":
        # the parquet writer opens the name: refused before the work; a terminal cannot show parquet
        refuse_redirected_to_a_file(output)
        if output is None and not is_standard_output(json_out) and _is_terminal(sys.stdout):
            raise CapgeoError("parquet is binary and standard output is a terminal: give -o FILE.parquet "
                              "or redirect standard output to a file")
    refuse_path_clashes()
    from capgeo.pipeline import dupes_dataset

    captions = load_from_options(options)
    section = dupes_dataset(captions, kind, encode_from_options(options), **section_options)
    if before_output is not None:
        before_output(section)
    for note in section.warnings or ():
        click.echo(f"Warning: {note}", err=True)
    if json_out is not None:
        from capgeo.cli.options import print_json

        print_json(section.to_dict(), json_out)
    if is_standard_output(json_out) and output is None:
        return section  # stdout holds the JSON alone
    if output_format == "text":
        _write_text(section, output)
    else:
        from capgeo.findings.duplicates import section_columns, section_rows, write_rows

        write_rows(section_rows(section), output_format, output, stream=sys.stdout, columns=section_columns(section))
    if output is not None:
        click.echo(f"Wrote {output}", err=True)
    return section


def _is_terminal(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # closed or replaced streams are no terminal
        return False


def _write_text(section, output: str | None) -> None:
    from rich.console import Console

    if output is None:
        render(section, terminal.console(highlight=False))
        return
    from capgeo._atomic import atomic_open

    with atomic_open(output) as handle:
        render(section, Console(file=handle, highlight=False, color_system=None, width=100))
