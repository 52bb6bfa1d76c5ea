"""Options shared by every command that reads a dataset or encodes it."""

from __future__ import annotations


import click

FORMATS = [
    "auto", "docci", "docci-json", "urban1k", "coco", "karpathy", "coco-list", "dci", "dci-json",
    "sharegpt4v", "jsonl", "json", "csv", "tsv", "parquet", "text",
]


def dataset_options(command):
    """DATA argument plus the options that say how to read it."""
    decorators = [
        click.argument("data", type=click.Path(exists=True, dir_okay=True, path_type=str)),
        click.option("--format", "data_format", type=click.Choice(FORMATS), default="auto", show_default=True,
                     help="Dataset format; detected from the file or folder when 'auto'."),
        click.option("--text-column", help="Column/key holding the caption text."),
        click.option("--captions-column", help="Column/key holding a list of captions (one group per row)."),
        click.option("--id-column", help="Column/key holding a unique caption id."),
        click.option("--group-column", help="Column/key naming the image a caption describes."),
        click.option("--split", "split", help="Keep only rows of this split (e.g. test)."),
        click.option("--limit", "limit", type=click.IntRange(min=1), help="Keep only the first N captions."),
    ]
    for decorator in reversed(decorators):
        command = decorator(command)
    return command


def load_from_options(options: dict):
    """Pop the dataset options from a command's kwargs and load the captions; rows left
    out while reading are reported on stderr by every command."""
    from capgeo.captions import load_captions

    captions = load_captions(
        options.pop("data"),
        format=options.pop("data_format"),
        text_column=options.pop("text_column"),
        captions_column=options.pop("captions_column"),
        id_column=options.pop("id_column"),
        group_column=options.pop("group_column"),
        split=options.pop("split"),
        limit=options.pop("limit"),
    )
    for skipped in captions.skipped:
        click.echo(f"Warning: skipped {skipped.count} row(s): {skipped.reason} (at {', '.join(skipped.examples)})",
                   err=True)
    return captions


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


def embed_from_options(captions, options: dict, max_tokens: int | None = None):
    """Pop the encoder options from a command's kwargs and return the captions' Embeddings."""
    from capgeo.encoders import embed

    return embed(
        captions,
        options.pop("encoder"),
        device=options.pop("device"),
        cache_dir=options.pop("cache_dir"),
        use_cache=not options.pop("no_cache"),
        max_tokens=max_tokens,
    )


def writable_output(ctx, param, value):
    """click callback: an output file that cannot be written fails before any work is done."""
    if value not in (None, "-"):
        from capgeo._atomic import check_writable
        from capgeo.errors import CapgeoError

        try:
            check_writable(value)
        except CapgeoError as error:
            raise click.BadParameter(str(error)) from None
    return value


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


def json_option(command):
    return click.option("--json", "json_out", is_flag=False, flag_value="-", default=None, metavar="[FILE]",
                        callback=writable_output,
                        help="Write the result as JSON to FILE, or to stdout when no file is given.")(command)


def emit(result: dict, json_out: str | None, show) -> None:
    """A command's output: JSON to stdout (only that), or to a file and the terminal
    summary ``show(result)``, or the summary alone."""
    if json_out:
        print_json(result, json_out)
    if json_out != "-":
        show(result)


def print_json(payload: dict, destination: str) -> None:
    """Write JSON to stdout ('-') or atomically to a file."""
    import json

    text = json.dumps(payload, indent=2, ensure_ascii=False, allow_nan=False)
    if destination == "-":
        click.echo(text)
        return
    from capgeo._atomic import atomic_open

    with atomic_open(destination) as handle:
        handle.write(text + "\n")
    click.echo(f"Wrote {destination}", err=True)


def comma_separated_floats(ctx, param, value):
    """click callback: '0.7,0.8,0.9' -> (0.7, 0.8, 0.9); None stays None."""
    if value is None:
        return None
    try:
        return tuple(float(part) for part in value.replace(" ", "").split(",") if part)
    except ValueError:
        raise click.BadParameter(f"expected comma-separated numbers such as 0.7,0.8,0.9, got {value!r}") from None


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
