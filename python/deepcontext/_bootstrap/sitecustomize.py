"""DeepContext's start-up hook for the ranks of a launcher run under `deepcontext run`.

`deepcontext run -- torchrun ...` puts this directory at the front of PYTHONPATH of the processes
the launcher starts, so this module runs at their interpreter start-up: a process that is a rank
(RANK and WORLD_SIZE set) starts profiling itself (deepcontext.distributed._autostart). Any other
sitecustomize module on the path is then run as well, as if this one were not there.
"""


def _run() -> None:
    import importlib.machinery
    import importlib.util
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    if os.environ.get("DEEPCONTEXT_DIST_CHILD"):
        try:
            import deepcontext.distributed as dist
        except ImportError:
            sys.path.append(os.path.dirname(os.path.dirname(here)))
            try:
                import deepcontext.distributed as dist
            except ImportError as exc:
                print(f"deepcontext: cannot profile this process: {exc}", file=sys.stderr)
                dist = None
        if dist is not None:
            dist._autostart()
    # chain to the sitecustomize this one shadows, if any
    mine = sys.modules.pop("sitecustomize", None)
    path = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None:
        if mine is not None:
            sys.modules["sitecustomize"] = mine
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        print(f"deepcontext: error in {spec.origin}: {exc}", file=sys.stderr)


_run()
