"""`ssdbench merge`: join the folders of a sweep run as shards (`sweep --shard I/N`) into one sweep."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ssdbench.cli.errors import reports_errors

Shards = Annotated[list[Path], typer.Argument(help="The shards' sweep folders (each `sweep --shard I/N --out`).",
                                              show_default=False)]
MergeOut = Annotated[Path, typer.Option("--out", help="A new (or empty) folder for the merged sweep.")]


@reports_errors
def merge_command(shards: Shards, out: MergeOut) -> None:
    from ssdbench.run.sweep_shard import merge_shards

    names = merge_shards(list(shards), out)
    typer.echo(f"Merged {len(shards)} shard(s), {len(names)} point(s): {out}")
