"""`capgeo truncation`: what the context length does to the caption geometry."""

from __future__ import annotations

import click

from capgeo import terminal
from capgeo.display import visible
from capgeo.cli.options import (
    PairThreshold,
    comma_separated_floats,
    dataset_options,
    emit,
    encode_from_options,
    encoder_options,
    floats_text,
    json_option,
    load_from_options,
    refuse_path_clashes,
    reproduce_command,
    seed_option,
)
from capgeo.cli.pass_options import block_size_option
from capgeo.defaults import TRUNCATION_LISTED_PAIRS
from capgeo.geometry.profile_options import ProfileOptions

#: the defaults shared with `capgeo profile`, read from their one place (the dataclass fields)
DEFAULTS = ProfileOptions()

#: characters of the unseen part shown on the terminal (the JSON has the whole text)
UNSEEN_SHOWN = 240
SEEN_STYLE = ""
UNSEEN_STYLE = "dim"
CUT_MARK = " ‖ "


def _parse_lengths(ctx, param, value):
    if value is None:
        return None
    from capgeo.errors import CapgeoError
    from capgeo.findings.truncation import parse_lengths

    try:
        return parse_lengths(value)
    except CapgeoError as error:
        raise click.BadParameter(str(error).removeprefix("--lengths: ")) from None


@click.command(short_help="What the context length does to the caption geometry of DATA.")
@dataset_options
@encoder_options
@click.option("--lengths", callback=_parse_lengths, default=None, metavar="L1,L2,...",
              help="Maximum token lengths to compare (start/end tokens included); the encoder's full context "
                   "is always added as the reference. Default: 32,64,77,128,248, those below the context.")
@click.option("--batch-size", type=click.IntRange(min=2), default=None, metavar="B",
              help="Effective contrastive batch of the in-batch bucket composition (default 128, the paper's, "
                   "or every image of a smaller dataset). The same batches are used at every length.")
@click.option("--n-batches", type=click.IntRange(min=1), default=DEFAULTS.n_batches, show_default=True,
              help="Random batches drawn (the same ones at every length).")
@click.option("--buckets", callback=comma_separated_floats, default=floats_text(DEFAULTS.buckets), show_default=True,
              metavar="EDGES",
              help="Cosine edges of the in-batch hardness buckets.")
@click.option("--threshold", type=PairThreshold(), default=None, metavar="T",
              help="Near-duplicate cosine (pairs of different groups); default: the profile's, "
                   f"{DEFAULTS.near_duplicate_threshold:g}.")
@seed_option("Seed of the batch draws.")
@click.option("--top", "max_listed", type=click.IntRange(min=0), default=TRUNCATION_LISTED_PAIRS, show_default=True,
              metavar="N",
              help="Truncation-only near-duplicate pairs listed per length (0: none; all are counted).")
@click.option("--top-k", type=click.IntRange(min=1), default=DEFAULTS.top_k, show_default=True,
              help="Companions kept per caption in the pairwise pass.")
@block_size_option
@json_option
def truncation(lengths, batch_size, n_batches, buckets, threshold, seed, max_listed, top_k, block_size, json_out,
               **options):
    """What the context length does to the caption geometry of DATA: for each maximum
    token length, the share of captions cut, the negative and hardest-companion cosines,
    the in-batch buckets and the near-duplicate pairs; the pairs that are near-duplicates
    only because of truncation, with the cut point in their text; and how far each
    caption's embedding moves when more of it is seen. See `capgeo docs truncation`."""
    from capgeo.pipeline import truncation_dataset

    refuse_path_clashes()
    captions = load_from_options(options)
    # the pipeline checks every option before the encoding
    run = truncation_dataset(
        captions, encode_from_options(options),
        ProfileOptions(batch_sizes=None if batch_size is None else (batch_size,), n_batches=n_batches, buckets=buckets,
                       seed=seed, top_k=top_k, block_size=block_size),
        lengths=lengths, threshold=threshold, max_listed=max_listed, command=reproduce_command())
    emit(run.profile, json_out, _render_on_terminal)


def _render_on_terminal(result) -> None:

    render(result, terminal.console(highlight=False))


# --------------------------------------------------------------------------- rendering


def _fmt(value, spec: str = ".3f") -> str:
    return "n/a" if value is None else format(value, spec)


def render(result, console) -> None:
    """The truncation section of a profile (typed, or its dict) on a rich console."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    from capgeo.geometry.typed_profile import Distribution, as_profile

    result = as_profile(result)
    section, encoder, dataset = result.truncation, result.encoder, result.dataset
    tokens = section.tokens
    console.print(Text(f"{visible(dataset.source)}: {section.n_captions:,} captions, {section.n_groups:,} "
                       f"groups; encoder {visible(encoder.spec)} ({visible(encoder.name)}, context "
                       f"{section.context_length} tokens)",
                       style="dim"))
    console.print(f"Caption tokens: mean {_fmt(tokens.mean, '.1f')}, median "
                  f"{_fmt(tokens.quantile('p50'), '.0f')}, p90 {_fmt(tokens.quantile('p90'), '.0f')}, "
                  f"max {_fmt(tokens.max, '.0f')}")

    per_length = section.per_length
    names = [f"{entry.max_tokens}" + ("*" if entry.reference else "") for entry in per_length]

    geometry = Table(title="Geometry by maximum token length", title_justify="left", box=box.SIMPLE_HEAD)
    for column in ("tokens", "cut", "neg mean", "HC mean", "HC p50", "HC p90",
                   f">= {section.threshold:g}", "cut-only"):
        geometry.add_column(column, justify="right", no_wrap=True)
    for name, entry in zip(names, per_length):
        hardest = entry.hardest_companion
        geometry.add_row(name, f"{entry.share_cut:.1%}", _fmt(entry.pairwise.mean), _fmt(hardest.mean),
                         _fmt(hardest.quantile("p50")), _fmt(hardest.quantile("p90")),
                         f"{entry.near_duplicates.n_pairs:,}",
                         f"{entry.near_duplicates.n_truncation_only:,}")
    console.print(geometry)
    console.print(Text(f"tokens: maximum token length L (* the full context, the reference); "
                       f"neg: cosine of captions of different groups; HC: hardest companion (each caption's most "
                       f"similar caption of another group); >= {section.threshold:g}: near-duplicate pairs of "
                       "different groups; cut-only: of those, the pairs below it at full context.", style="dim"))

    buckets = Table(title=f"In-batch negatives, B = {section.batch_size}, {section.n_batches} batches "
                          f"(seed {section.seed}, the same batches at every length)", title_justify="left",
                    box=box.SIMPLE_HEAD)
    terminal.add_whole_word_columns(buckets, ("tokens", *per_length[0].buckets.labels, "hardest p50"),
                                    justify="right")
    for name, entry in zip(names, per_length):
        buckets.add_row(name, *(f"{share:.2%}" for share in entry.buckets.shares),
                        _fmt(entry.hardest_in_batch.quantile("p50")))
    terminal.print_unclipped(console, buckets)

    moved = Table(title="How far embeddings move: cosine to the full-context embedding", title_justify="left",
                  box=box.SIMPLE_HEAD)
    for column in ("tokens", "all: mean", "all: p10", "cut: n", "cut: mean", "cut: p10", "cut: min"):
        moved.add_column(column, justify="right")
    for name, entry in zip(names, per_length):
        # each a summary of cosines to the full-context embedding: of every caption, of the cut ones
        every, cut = (Distribution.from_dict(entry.movement[key]) for key in ("all", "cut"))
        moved.add_row(name, _fmt(every.mean), _fmt(every.quantile("p10")), f"{cut.count:,}",
                      _fmt(cut.mean), _fmt(cut.quantile("p10")), _fmt(cut.min))
    console.print(moved)
    _render_pairs(section, console)


def _render_pairs(section, console) -> None:
    from rich.text import Text

    pairs = section.truncation_only_pairs
    if not pairs:
        counted = sum((entry.near_duplicates.n_truncation_only if entry.near_duplicates else None) or 0
                      for entry in section.per_length)
        if counted:  # --top 0: counted in the table above, none listed
            console.print(f"{counted:,} truncation-only near-duplicate pairs are counted above; none listed "
                          f"(--top {section.max_listed}).")
        else:
            console.print(f"No pair is a near-duplicate (cosine >= {section.threshold:g}) only because of "
                          "truncation.")
        return
    console.print(Text.assemble(
        ("Near-duplicates only because of truncation", "bold"),
        f" (cosine >= {section.threshold:g} when cut, below at full context). ",
        ("seen by the encoder", SEEN_STYLE), CUT_MARK, ("not seen", UNSEEN_STYLE)))
    for number, pair in enumerate(pairs, start=1):
        console.print(Text.assemble(
            (f"{number}. L={pair['max_tokens']}", "bold"),
            f"  cosine {pair['cosine_at_length']:.4f} at {pair['max_tokens']} tokens, "
            f"{pair['cosine_full']:.4f} at {section.reference_length}"))
        for side in ("a", "b"):
            console.print(_caption_text(pair[side]))


def _caption_text(caption: dict):
    from rich.padding import Padding
    from rich.text import Text

    text, offset = caption["text"], caption["cut_offset"]
    heading = Text.assemble((visible(caption["id"]), "cyan"),
                            (f"  (group {visible(caption['group'])}, {caption['tokens']} tokens)", "dim"))
    body = Text()
    if offset is None:
        body.append(visible(text))
    else:
        body.append(visible(text[:offset]), style=SEEN_STYLE)
        unseen = text[offset:]
        if unseen.strip():
            body.append(CUT_MARK, style="bold red")
            shown = unseen if len(unseen) <= UNSEEN_SHOWN else unseen[:UNSEEN_SHOWN].rstrip() + " …"
            body.append(visible(shown.lstrip()), style=UNSEEN_STYLE)
    return Padding(Text.assemble(heading, "\n", body), (0, 0, 0, 4))
