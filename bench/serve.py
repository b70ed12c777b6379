"""Start a server under test with its file-descriptor limit raised: `python -m bench.serve daphne|uvicorn ARGS`.

Thousands of idle sockets need thousands of descriptors; the soft limit is raised in-process (setrlimit) so
the bench works the same whether or not the calling shell ran `ulimit -n`.
"""

import sys

from bench.harness import raise_fd_limit


def main() -> None:
    server, args = sys.argv[1], sys.argv[2:]
    raise_fd_limit()
    sys.argv = [server, *args]
    if server == "daphne":
        from daphne.cli import CommandLineInterface

        CommandLineInterface.entrypoint()
    elif server == "uvicorn":
        import uvicorn

        uvicorn.main()
    else:
        raise SystemExit(f"unknown server {server!r}: daphne or uvicorn")


if __name__ == "__main__":
    main()
