"""``macmesh keys``: the API keys the window makes, from a terminal (the same store:
``api-keys.json`` in the user data folder, kept as hashes, 0600). ``keys new LABEL``
prints the new key once (it is never shown again); ``keys list`` shows each key's id,
label, first characters and when it was made; ``keys revoke ID`` forgets one. ``macmesh
serve`` accepts every key of this store, as the window's API does."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from typing import TextIO

from core import paths
from core.serve.keys import KeyStore

MAX_LABEL = 80


def keys_cli(
    argv: Sequence[str] | None = None, out: TextIO = sys.stdout, err: TextIO = sys.stderr
) -> int:
    parser = argparse.ArgumentParser(prog="macmesh keys", description=__doc__.split("\n")[0])
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    made = verbs.add_parser("new", help="make a key: printed once")
    made.add_argument("label", help="who or what the key is for (shown in lists and logs)")
    listed = verbs.add_parser("list", help="the keys (never the keys themselves)")
    listed.add_argument("--json", action="store_true")
    revoked = verbs.add_parser("revoke", help="forget a key: its requests are refused")
    revoked.add_argument("id", help="the key's id, as `macmesh keys list` shows it")
    args = parser.parse_args(argv)
    store = KeyStore()
    try:
        if args.verb == "new":
            label = " ".join(args.label.split())
            if not label or len(label) > MAX_LABEL or not label.isprintable():
                err.write(f"macmesh: the label must be 1 to {MAX_LABEL} printable characters\n")
                return 2
            info, key = store.create(label)
            out.write(f"{key}\n")
            err.write(f"Key {info.id} ({info.label}) made; it is shown this once: copy it now.\n")
            return 0
        if args.verb == "list":
            keys = store.keys()
            if args.json:
                out.write(json.dumps([k.as_dict() for k in keys]) + "\n")
            elif not keys:
                out.write("No keys yet: `macmesh keys new LABEL` makes one.\n")
            for info in [] if args.json else keys:
                made_at = time.strftime("%Y-%m-%d %H:%M", time.localtime(info.created))
                out.write(f"{info.id}  {info.start}…  {made_at}  {info.label}\n")
            return 0
        if store.revoke(args.id):
            out.write(f"Key {args.id} revoked: its requests are refused from now on.\n")
            return 0
        err.write(f"macmesh: no key {args.id!r}: `macmesh keys list` shows the ids\n")
        return 1
    except (paths.FolderError, OSError) as error:
        err.write(f"macmesh: the keys cannot be used: {error}\n")
        return 2
