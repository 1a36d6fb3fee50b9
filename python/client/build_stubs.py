"""The build step of coroner-client: Python stubs for coronerd's protocol, generated from the
repository's ``proto/coroner/v1/*.proto`` with grpcio-tools.

``generate(build_lib)`` writes ``coroner_client/_proto/`` under ``build_lib`` (setup.py calls it
while pip builds the wheel). Run as a script, ``python3 build_stubs.py OUT`` copies the package to
``OUT`` and generates its stubs there: an importable client without installing it (the
integration test uses this).

The .proto files are staged as ``coroner_client/_proto/<name>.proto`` before protoc runs, so the
generated modules import each other as ``coroner_client._proto.<name>_pb2``: the package never
claims a top-level ``coroner`` module. The protobuf package (``coroner.v1``) is unchanged, so the
messages and services are the server's.
"""

import glob
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
# python/client -> the repository's proto/ folder; CORONER_PROTO_DIR overrides it.
DEFAULT_PROTO_DIR = os.path.join(HERE, "..", "..", "proto", "coroner", "v1")
PACKAGE = "coroner_client"
SUBPACKAGE = "_proto"


def proto_dir():
    folder = os.environ.get("CORONER_PROTO_DIR") or DEFAULT_PROTO_DIR
    if not glob.glob(os.path.join(folder, "*.proto")):
        raise SystemExit(
            f"coroner-client: no .proto files in {os.path.abspath(folder)}; build it from the repository "
            "(pip install ./python/client) or set CORONER_PROTO_DIR to the folder holding coroner/v1's .proto files"
        )
    return folder


def generate(build_lib):
    """Writes the stubs under ``build_lib/coroner_client/_proto``; returns the files written."""
    from grpc_tools import protoc  # a build requirement: imported only when building

    try:
        from importlib.resources import files

        include = str(files("grpc_tools") / "_proto")
    except (ImportError, TypeError):
        include = os.path.join(os.path.dirname(protoc.__file__), "_proto")
    out = os.path.join(build_lib, PACKAGE, SUBPACKAGE)
    os.makedirs(out, exist_ok=True)
    with tempfile.TemporaryDirectory() as staging:
        staged = os.path.join(staging, PACKAGE, SUBPACKAGE)
        os.makedirs(staged)
        names = []
        for path in sorted(glob.glob(os.path.join(proto_dir(), "*.proto"))):
            name = os.path.basename(path)
            shutil.copyfile(path, os.path.join(staged, name))
            names.append(f"{PACKAGE}/{SUBPACKAGE}/{name}")
        args = ["grpc_tools.protoc", f"-I{staging}", f"-I{include}", f"--python_out={build_lib}", f"--grpc_python_out={build_lib}", f"--pyi_out={build_lib}"]
        if protoc.main(args + names) != 0:
            raise SystemExit(f"coroner-client: protoc failed on {names}")
    init = os.path.join(out, "__init__.py")
    with open(init, "w") as f:
        f.write('"""Generated from proto/coroner/v1 by build_stubs.py at build time; not committed."""\n')
    return sorted(glob.glob(os.path.join(out, "*")))


def main(argv):
    if len(argv) != 2:
        raise SystemExit("usage: python3 build_stubs.py OUT  (copies coroner_client to OUT and generates its stubs there)")
    out = argv[1]
    shutil.copytree(os.path.join(HERE, PACKAGE), os.path.join(out, PACKAGE), dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__", SUBPACKAGE))
    generate(out)


if __name__ == "__main__":
    main(sys.argv)
