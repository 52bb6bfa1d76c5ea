"""Options shared by every command that reads a dataset or encodes it."""

from __future__ import annotations

import contextlib
import math
import os

import click

FORMATS = [
    "auto", "docci", "docci-json", "urban1k", "coco", "karpathy", "coco-list", "dci", "dci-json",
    "sharegpt4v", "jsonl", "json", "csv", "tsv", "parquet", "arrow", "text", "webdataset",
]


def dataset_options(command):
    """DATA argument plus the options that say how to read it."""
    # not checked by click: a quoted glob or brace pattern ('shards/*.parquet') names files, not a
    # path, and a missing path is one Error: line from the loader
    return click.argument("data", type=click.Path(dir_okay=True, path_type=str))(read_options(command))


def read_options(command):
    """The options that say how to read a dataset (`leak` and `compare` apply them to each one they read)."""
    decorators = [
        click.option("--format", "data_format", type=click.Choice(FORMATS), default="auto", show_default=True,
                     help="Dataset format; detected from the file or folder when 'auto'."),
        click.option("--text-column", help="Column/key holding the caption text (case-insensitive when no "
                                           "column matches exactly)."),
        click.option("--captions-column", help="Column/key holding a list of captions (one group per row)."),
        click.option("--id-column", help="Column/key holding a unique caption id."),
        click.option("--group-column", help="Column/key naming the image a caption describes."),
        click.option("--image-column", help="Column/key locating each caption's image: a path, or a Hugging Face "
                                            "Image feature (and the group, unless --group-column names another)."),
        click.option("--images", "images", metavar="DIR", help="Folder holding the dataset's images, where they "
                                                              "are not beside the captions (docs/formats.md)."),
        click.option("--split", "split", help="Keep only rows of this split (e.g. test)."),
        click.option("--limit", "limit", type=click.IntRange(min=1), help="Keep only the first N captions."),
    ]
    for decorator in reversed(decorators):
        command = decorator(command)
    return command


@contextlib.contextmanager
def column_notes():
    """A column option matched only ignoring case (capgeo.captions.tabular.ColumnCaseWarning)
    becomes one "Note:" line on stderr; other warnings pass through unchanged."""
    import warnings

    from capgeo.captions.tabular import ColumnCaseWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ColumnCaseWarning)
        yield
    for warning in caught:
        if issubclass(warning.category, ColumnCaseWarning):
            click.echo(f"Note: {warning.message}", err=True)
        else:
            warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)


def load_from_options(options: dict):
    """Pop the dataset options from a command's kwargs and load the captions; rows left
    out while reading are reported on stderr by every command."""
    from capgeo.captions import load_captions

    with column_notes():
        captions = load_captions(options.pop("data"), **pop_load_options(options))
    for skipped in captions.skipped:
        warn_skipped(skipped)
    return captions


def pop_load_options(options: dict) -> dict:
    """Pop the dataset options (all but DATA itself) as load_captions' keyword arguments."""
    return {"format": options.pop("data_format"), "text_column": options.pop("text_column"),
            "captions_column": options.pop("captions_column"), "id_column": options.pop("id_column"),
            "group_column": options.pop("group_column"), "split": options.pop("split"),
            "limit": options.pop("limit"), "image_column": options.pop("image_column"),
            "images": options.pop("images")}


def warn_skipped(skipped) -> None:
    """One stderr line for rows left out while reading (a capgeo.captions.model.Skipped)."""
    from capgeo.display import visible

    # the places name files and keys of the dataset: shown, not acted on by the terminal
    click.echo(visible(f"Warning: skipped {skipped.count} row(s): {skipped.reason} (at {', '.join(skipped.examples)})"),
               err=True)


def encoder_options(command):
    """--encoder and how/where to run and cache it."""
    decorators = [
        click.option("--encoder", "encoder", default=None, metavar="SPEC",
                     help="Text encoder (see `capgeo encoders`); default: the embedded all-MiniLM-L6-v2."),
        click.option("--device", default=None, help="cuda, mps or cpu; default: the best available."),
        click.option("--cache-dir", type=click.Path(file_okay=False, path_type=str), default=None,
                     help="Embedding cache folder (default: $CAPGEO_CACHE or ~/.cache/capgeo)."),
        click.option("--no-cache", is_flag=True, help="Neither read nor write the embedding cache."),
    ]
    for decorator in reversed(decorators):
        command = decorator(command)
    return command


def max_tokens_option(command):
    """--max-tokens: cut captions to this many tokens (EncodeOptions.max_tokens)."""
    return click.option("--max-tokens", type=click.IntRange(min=2), default=None,
                        help="Cut captions to this many tokens (default: the encoder's context length).")(command)


def encode_from_options(options: dict, max_tokens: int | None = None, *, encoder: bool = True):
    """Pop the encoder options (--encoder unless ``encoder`` is False, --device, --cache-dir,
    --no-cache) from a command's kwargs as one EncodeOptions, with --ray's address where the
    command takes it (its session is opened around the command by :func:`ray_option`)."""
    from capgeo.pipeline import EncodeOptions

    params = click.get_current_context().params
    return EncodeOptions(encoder=options.pop("encoder") if encoder else None, device=options.pop("device"),
                         cache_dir=options.pop("cache_dir"), use_cache=not options.pop("no_cache"),
                         max_tokens=max_tokens, ray_address=params.get("ray_address"))


def ray_option(command):
    """--ray [ADDRESS]: run the command's encoding and exact pairwise pass on Ray (docs/scale.md)."""
    import functools

    @functools.wraps(command)
    def on_ray(*args, ray_address=None, **kwargs):
        from capgeo.scale.session import ray_session

        with ray_session(ray_address) as session:
            result = command(*args, **kwargs)
            if session is not None:
                click.echo(session.summary(), err=True)
            return result

    return click.option("--ray", "ray_address", is_flag=False, flag_value="local", default=None, metavar="[ADDRESS]",
                        help="Encode and run the exact pairwise pass on Ray: a local Ray instance without ADDRESS, "
                             "'auto' to join a running cluster, or host:port (needs capgeo[ray]; `capgeo docs scale`)."
                        )(on_ray)


def writable_output(ctx, param, value):
    """click callback: an output file that cannot be written fails before any work is done."""
    if value is not None and not value.strip():
        # '' would resolve to the current folder: "cannot write : it is a folder"
        raise click.BadParameter("an empty file name; give the file to write")
    if value == "-" and getattr(param, "name", None) != "json_out":
        # only --json writes to standard output; the others would have written a file named "-"
        raise click.BadParameter("'-' (standard output) is not accepted here; give a file name")
    if value not in (None, "-"):
        from capgeo._atomic import check_writable
        from capgeo.errors import CapgeoError

        try:
            check_writable(value)
        except CapgeoError as error:
            raise click.BadParameter(str(error)) from None
    return value


def given(name: str) -> bool:
    """Did the user give this parameter of the running command on the command line?"""
    return click.get_current_context().get_parameter_source(name) == click.core.ParameterSource.COMMANDLINE


def unused_option_notes(*rules: tuple[str, bool, str]) -> list[str]:
    """Notes for options given that the rest of the command line makes unused: each rule is
    (parameter name, whether it is unused, why), noted only when the user gave it."""
    return [f"--{name.replace('_', '-')} {why}" for name, unused, why in rules if unused and given(name)]


#: characters that make DATA a glob or brace pattern (capgeo.captions.shards.is_pattern)
PATTERN_CHARS = "*?[{"


def default_output_stem(source: str) -> str:
    """The name a command's default output takes from DATA: its stem (``captions`` for
    ``captions.jsonl``); for a glob or brace pattern the stem up to its first pattern character,
    else the folder the pattern is in (``part`` for ``s/part-{00000..00099}.parquet``, ``s`` for
    ``s/*.jsonl``), never a name with ``*`` or braces in it; ``capgeo`` when nothing is left."""
    from pathlib import Path

    path = Path(source)
    for part in (path.stem, *(parent.name for parent in path.parents)):
        cut = min((part.index(char) for char in PATTERN_CHARS if char in part), default=len(part))
        name = part[:cut].rstrip("-_. ") if cut < len(part) else part
        if name and name not in (".", ".."):
            return name
        if cut == len(part) and part:  # a pattern-free part that is only "." or "..": stop here
            break
    return "capgeo"


def writable_default_output(path: str) -> str:
    """A command's default output name, checked before any work as a given -o is (one line naming it)."""
    from capgeo._atomic import check_writable
    from capgeo.errors import CapgeoError

    try:
        check_writable(path)
    except CapgeoError as error:
        raise CapgeoError(f"{error} (the default output; -o FILE writes elsewhere)") from None
    return path


#: command parameters that name files a command reads, and those it writes, with their labels
INPUT_PARAMS = {"data": "DATA", "sources": "SOURCES", "image_embeddings": "--image-embeddings", "leak": "--leak",
                "train": "TRAIN", "evals": "EVAL", "train_image_embeddings": "--train-image-embeddings",
                "eval_image_embeddings": "--eval-image-embeddings"}
ENCODER_PARAMS = ("encoder", "encoders")
OUTPUT_PARAMS = {"output": "--output", "json_out": "--json", "save_profile": "--save-profile",
                 "per_caption": "--per-caption", "drop_list": "--drop-list", "false_negatives": "--false-negatives"}


def refuse_path_clashes(*, defaults: tuple[str, ...] = (), extra_inputs: dict | None = None,
                        **extra_outputs: str | None) -> None:
    """Before any work: no output of the running command may be one of its inputs
    (dataset, files in a dataset folder, vector files, checkpoints, profiles) or
    another of its outputs, nor, without --force, an existing file capgeo did not write.
    ``extra_outputs`` are outputs the command derives itself; ``defaults`` names those of them
    that are default names the user did not give; ``extra_inputs`` (label -> paths) are files it
    reads that no parameter names (those a saved profile names)."""
    from capgeo.paths import check_outputs, encoder_input_files

    params = click.get_current_context().params
    inputs = {label: params.get(name) for name, label in INPUT_PARAMS.items()}
    inputs["--encoder"] = [path for spec in _encoder_specs(params) for path in encoder_input_files(spec)]
    for label, paths in (extra_inputs or {}).items():
        given_paths = inputs.get(label)
        given_paths = [] if given_paths is None else [given_paths] if isinstance(given_paths, str) else list(given_paths)
        inputs[label] = given_paths + ([paths] if isinstance(paths, str) else [p for p in paths or () if p])
    outputs = {label: params.get(name) for name, label in OUTPUT_PARAMS.items()}
    check_outputs(inputs, {**outputs, **extra_outputs}, force=forced(), defaults=defaults, force_with="add --force")


def force_option(command):
    """--force: replace existing output files that capgeo did not write (refused without it)."""
    def remember(ctx, param, value):
        ctx.meta[FORCE_KEY] = bool(value)
        return value

    return click.option("--force", is_flag=True, expose_value=False, callback=remember,
                        help="Replace an existing output file even when capgeo did not write it "
                             "(without --force only an earlier capgeo output is replaced).")(command)


#: where --force's value is kept for the running command (ctx.meta, so no command takes it as an argument)
FORCE_KEY = "capgeo.force"


def forced() -> bool:
    """Was --force given to the running command?"""
    ctx = click.get_current_context(silent=True)
    return bool(ctx is not None and ctx.meta.get(FORCE_KEY))


def _encoder_specs(params: dict) -> list[str | None]:
    """The --encoder values of the running command (one, several, or the default None)."""
    specs = []
    for name in ENCODER_PARAMS:
        value = params.get(name)
        specs += [value] if isinstance(value, str) else list(value or ())
    return specs


def row_file_output(suffixes: dict[str, str]):
    """click callback factory: an output file whose suffix names one of ``suffixes``'s row
    formats and that can be written, checked before any work is done."""
    def check(ctx, param, value):
        if value is not None:
            from capgeo.errors import CapgeoError
            from capgeo.findings.per_caption import table_format

            try:
                table_format(value, suffixes)
            except CapgeoError as error:
                raise click.BadParameter(str(error)) from None
        return writable_output(ctx, param, value)

    return check


def image_embeddings_option(what: str, flag: str = "--image-embeddings", *, whose: str = "Image vectors",
                            multiple: bool = False):
    """--image-embeddings FILE (one definition: gamma, profile and report take it, and leak as
    --train-image-embeddings and --eval-image-embeddings); ``what``: what the vectors add to the
    command's result, the end of its help; ``whose``: the help's subject; ``multiple``: repeatable."""
    return click.option(flag, type=click.Path(exists=True, dir_okay=False, path_type=str), multiple=multiple,
                        default=None, metavar="FILE",
                        help=f"{whose} of the same CLIP: .npy with one row per group in the dataset's group "
                             "order (first appearance), or .npz/.parquet with group ids. " + what)


def image_threshold_option(what: str):
    """--image-threshold T (profile, report, leak); ``what``: where the image vectors come from."""
    from capgeo.defaults import IMAGE_TWIN_THRESHOLD

    return click.option("--image-threshold", type=FiniteFloatRange(-1, 1), default=IMAGE_TWIN_THRESHOLD,
                        show_default=True, metavar="T",
                        help=f"Image-image cosine at or above which two images of different ids are twins ({what}).")


def pair_options(command):
    """The pairs section's options beside --image-embeddings (profile, report): docs/pairs.md."""
    from capgeo.defaults import PAIRS_DELTA

    decorators = [
        click.option("--delta", type=FiniteFloatRange(min=0), default=PAIRS_DELTA, show_default=True, metavar="D",
                     help="A caption of another image scoring at least the pair's own cosine less D for its image "
                          "is a cross-modal false negative (with --image-embeddings)."),
        image_threshold_option("with --image-embeddings"),
    ]
    for decorator in reversed(decorators):
        command = decorator(command)
    return command


def json_option(command):
    """--json [FILE], and --force, which every command that writes files takes (report and compare,
    without --json, take force_option themselves)."""
    command = force_option(command)
    return click.option("--json", "json_out", is_flag=False, flag_value="-", default=None, metavar="[FILE]",
                        callback=writable_output,
                        help="Write the result as JSON to FILE, or to stdout when no file is given.")(command)


def emit(result, json_out: str | None, show) -> None:
    """A command's output (a typed result, written as its ``to_dict()``, or a dict): JSON to stdout
    (only that), or to a file and the terminal summary ``show(result)``, or the summary alone."""
    from capgeo._atomic import is_standard_output

    if json_out:
        print_json(result.to_dict() if hasattr(result, "to_dict") else result, json_out)
    if not is_standard_output(json_out):  # JSON to stdout is all that goes there, by any name
        show(result)


def print_json(payload: dict, destination: str) -> None:
    """Write JSON to stdout ('-') or atomically to a file."""
    from capgeo._atomic import is_standard_output
    from capgeo._json_write import dumps

    text = dumps(payload)   # json.dumps(payload, indent=2, ensure_ascii=False, allow_nan=False), faster
    if is_standard_output(destination):  # "-", /dev/stdout, /dev/fd/1
        import sys

        from capgeo._atomic import write_all

        # UTF-8 whatever the terminal's encoding (JSON is UTF-8), and written in full or failing
        write_all(sys.stdout, (text + "\n").encode("utf-8"))
        return
    from capgeo._atomic import atomic_open

    with atomic_open(destination) as handle:
        handle.write(text + "\n")
    click.echo(f"Wrote {destination}", err=True)


def floats_text(values) -> str:
    """(0.7, 0.8, 0.9) -> '0.7,0.8,0.9': a default tuple as the command line writes it."""
    return ",".join(f"{value:g}" for value in values)


def comma_separated_floats(ctx, param, value):
    """click callback: '0.7,0.8,0.9' -> (0.7, 0.8, 0.9); None stays None."""
    if value is None:
        return None
    try:
        numbers = tuple(float(part) for part in value.replace(" ", "").split(",") if part)
    except ValueError:
        raise click.BadParameter(f"expected comma-separated numbers such as 0.7,0.8,0.9, got {value!r}") from None
    if not all(math.isfinite(number) for number in numbers):
        raise click.BadParameter(f"expected finite numbers, got {value!r}")
    return numbers


class FiniteFloatRange(click.FloatRange):
    """click's FloatRange without NaN and infinities: NaN passes every range comparison
    (--hard-edge nan would reach the formatting code), and no cosine, scale or share is infinite."""

    def convert(self, value, param, ctx):
        # finiteness first: "inf is not in the range 0<x<=10000" would hide what is wrong with it
        if not math.isfinite(click.FLOAT.convert(value, param, ctx)):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return super().convert(value, param, ctx)


class PairThreshold(FiniteFloatRange):
    """A threshold on pair cosines (dupes, profile, truncation): -1 to MAX_PAIR_THRESHOLD, checked
    when the command line is read, not after the encoding (the passes refuse it too)."""

    def __init__(self):
        from capgeo.defaults import MAX_PAIR_THRESHOLD

        super().__init__(-1.0, MAX_PAIR_THRESHOLD)  # the range --help shows
        self.highest = MAX_PAIR_THRESHOLD

    def convert(self, value, param, ctx):
        from capgeo.preflight import pair_threshold_problem

        number = click.FLOAT.convert(value, param, ctx)
        if self.highest < number <= 1.0:  # a cosine, but one no pair reaches: say why
            self.fail(pair_threshold_problem(number), param, ctx)
        return super().convert(number, param, ctx)


#: --seed: numpy's generators take non-negative seeds (a negative one raises a ValueError)
SEED = click.IntRange(min=0)


def seed_option(help: str):
    """--seed, with ProfileOptions' default (the seed of every command's batch draws)."""
    from capgeo.geometry.profile_options import ProfileOptions

    return click.option("--seed", type=SEED, default=ProfileOptions().seed, show_default=True, help=help)


def reproduce_command() -> str:
    """The command that reproduces the running one, rebuilt from its parsed parameters
    (defaults left out), so it is right however capgeo was started (console script,
    python -m, or a test runner)."""
    import shlex

    ctx = click.get_current_context()
    words = ["capgeo", ctx.info_name or ctx.command.name]
    arguments = []
    for param in ctx.command.params:
        value = ctx.params.get(param.name)
        if isinstance(param, click.Argument):
            arguments += list(value) if isinstance(value, (list, tuple)) else [value]
            continue
        if getattr(param, "is_flag", False):
            if value:
                words.append(max(param.opts, key=len))
            continue
        default = param.get_default(ctx)
        if param.callback is not None and isinstance(default, str):
            default = param.callback(ctx, param, default)
        if value is None or value == default or (param.multiple and not value):
            continue
        flag = max(param.opts, key=len)
        for item in (value if param.multiple else [value]):
            # values a callback parsed into a tuple go back to their comma-separated form
            text = ",".join(f"{v:g}" if isinstance(v, float) else str(v) for v in item) \
                if isinstance(item, (list, tuple)) else str(item)
            words += [flag, text]
    return shlex.join([*words[:2], *[str(a) for a in arguments], *words[2:]])


BATCH_SIZE_HELP = ("Effective contrastive batch of your training run (all captions sharing one softmax): "
                   "default 128, the paper's, or every image of a smaller dataset. The first --batch-size is "
                   "the headline (the gamma every command prints); repeat for extra rows.")


def batch_size_options(command):
    """--batch-size (repeatable) and --n-batches, with the one batch-size policy's defaults
    (capgeo.geometry.batch_size) and one help text for every command."""
    from capgeo.geometry.profile_options import ProfileOptions

    command = click.option("--n-batches", type=click.IntRange(min=1), default=ProfileOptions().n_batches,
                           show_default=True, help="Random batches drawn per batch size.")(command)
    return click.option("--batch-size", "batch_sizes", type=click.IntRange(min=2), multiple=True, metavar="B",
                        help=BATCH_SIZE_HELP)(command)


def gamma_list(ctx, param, value):
    """click callback: comma-separated gamma values, each from 0 to capgeo.defaults.MAX_GAMMA."""
    from capgeo.defaults import MAX_GAMMA

    if value is None:
        return None
    try:
        grid = [float(item) for item in value.replace(" ", "").split(",") if item]
    except ValueError:
        raise click.BadParameter(f"{value!r}: expected comma-separated numbers, e.g. 0,0.25,0.5,1") from None
    if not grid or not all(0 <= gamma <= MAX_GAMMA for gamma in grid):  # (NaN fails the comparison too)
        raise click.BadParameter(f"{value!r}: expected one or more finite gamma values >= 0, at most {MAX_GAMMA:,g}")
    return grid


def sweep_options(command):
    """--sweep and its --sweep-* options (one definition: gamma, profile and report take them);
    :func:`sweep_from_options` makes them one SweepOptions; the defaults are SweepOptions' own
    (capgeo.defaults, read here without importing numpy at start-up)."""
    from capgeo.defaults import SWEEP_GAMMAS, SWEEP_LEARNING_RATE, SWEEP_SEEDS, SWEEP_STEPS

    decorators = [
        click.option("--sweep", is_flag=True, default=False,
                     help="Measure gamma too: a short proxy fine-tune (an adapter on the frozen vectors) at every "
                          "sweep gamma, R@1/R@5 on held-out images (capgeo docs gamma); the measured gamma becomes "
                          "the headline. Without image vectors: a caption-caption proxy."),
        click.option("--sweep-gammas", callback=gamma_list, default=None, metavar="G1,G2,...",
                     help="gammas of the sweep, the rule's suggestion added. Default: "
                          + ",".join(f"{g:g}" for g in SWEEP_GAMMAS) + "."),
        click.option("--sweep-seeds", type=click.IntRange(min=1), default=len(SWEEP_SEEDS), show_default=True,
                     metavar="N", help="Seeds of the sweep (0..N-1): each its own split by image and batch order."),
        click.option("--sweep-steps", type=click.IntRange(min=1), default=SWEEP_STEPS, show_default=True,
                     help="Training steps of each sweep run (batches of the headline --batch-size)."),
        click.option("--sweep-lr", type=FiniteFloatRange(min=0, min_open=True), default=SWEEP_LEARNING_RATE,
                     show_default=True, help="Adam learning rate of the sweep's adapter."),
        click.option("--image-adapter", is_flag=True, default=False, help="Sweep: adapt the image side too."),
    ]
    for decorator in reversed(decorators):
        command = decorator(command)
    return command


def sweep_from_options(options: dict):
    """Pop :func:`sweep_options`' values from a command's kwargs: a SweepOptions with --sweep, else
    None (a --sweep-* option given without --sweep is noted on stderr, not silently dropped)."""
    from capgeo.findings.gamma_sweep import SweepOptions

    sweep, gammas, seeds = options.pop("sweep"), options.pop("sweep_gammas"), options.pop("sweep_seeds")
    steps, learning_rate, image_adapter = options.pop("sweep_steps"), options.pop("sweep_lr"), options.pop("image_adapter")
    if not sweep:
        for note in unused_option_notes(*((name, True, "applies only with --sweep") for name in
                                          ("sweep_gammas", "sweep_seeds", "sweep_steps", "sweep_lr", "image_adapter"))):
            click.echo(f"Note: {note}", err=True)
        return None
    return SweepOptions(seeds=tuple(range(seeds)), steps=steps, learning_rate=learning_rate,
                        image_adapter=image_adapter, **({} if gammas is None else {"gammas": tuple(gammas)}))
