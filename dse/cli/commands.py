"""The `dse` click group and `dse eval`, with what every command module shares.

``main`` turns errors into one line and an exit code: bad input exits 2 with a one-line error;
`--debug` shows the traceback instead. Heavy imports (optuna, pandas, matplotlib) happen inside
the commands that need them, so `dse eval` starts fast. The other commands live in
:mod:`.campaign` (run, sweep, export, storage-proxy), :mod:`.results` (pareto, report) and
:mod:`.catalog` (hw, models, runtimes, acceptance, validate); the package ``__init__`` adds them
to ``main``.
"""

from __future__ import annotations

import errno
import gc
import json
import mmap
import os
import sys

import click

from ..errors import DIST_NAME, DseError
from ..process.progress import note


class _Group(click.Group):
    """Turn DseError into `error: ...` and its exit code (2 for bad input, 1 for a runtime
    failure), an unreadable or unwritable path into `error: ...` and exit 1, running out of memory
    into one line and exit 1 (what filled it released first), and click's own usage errors (a bad
    flag value, a missing option) into one `error: ...` line, exit 2."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        _out_of_memory_said.clear()
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.exceptions.NoArgsIsHelpError as exc:
            exc.show()
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            ctx = getattr(exc, "ctx", None)
            how = f" (see `{ctx.command_path} --help`)" if ctx is not None else ""
            say(f"error: {exc.format_message()}{how}")
            sys.exit(exc.exit_code)
        except click.Abort:
            say("interrupted")
            sys.exit(130)
        except MemoryError as exc:  # click's own clean-up after a command ran out of memory
            _MEMORY_RESERVE.clear()
            _release_frames(exc)
            code = _RAN_OUT_OF_MEMORY
        if code is _RAN_OUT_OF_MEMORY:
            _exit_out_of_memory()
        sys.exit(code if isinstance(code, int) else 0)

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except DseError as exc:
            if ctx.obj and ctx.obj.get("debug"):
                raise
            for line in str(exc).splitlines() or [type(exc).__name__]:   # several errors of one file: a line each
                say(f"error: {line}")
            sys.exit(getattr(exc, "exit_code", 2))
        except KeyboardInterrupt:   # a second Ctrl-C/SIGTERM, or one outside dse run/sweep: no "Aborted!"
            say("interrupted")
            sys.exit(130)
        except BrokenPipeError:     # the output's reader has gone (`dse pareto ... | head`): what it read is all
            _silence_dead_streams()
            sys.exit(0)
        except MemoryError as exc:
            _MEMORY_RESERVE.clear()     # first, with no call that needs memory: room to handle it
            if ctx.obj and ctx.obj.get("debug"):
                raise
            _release_frames(exc)
        except OSError as exc:      # a path that cannot be read or written: a runtime failure
            if ctx.obj and ctx.obj.get("debug"):
                raise
            if not _out_of_memory(exc):
                say(f"error: {exc.filename or '(no file)'}: {exc.strerror or exc}")
                sys.exit(1)
            _MEMORY_RESERVE.clear()
            _release_frames(exc)
        except Exception as exc:    # what failed while memory ran out (a clean-up, an import)
            _MEMORY_RESERVE.clear()
            if (ctx.obj and ctx.obj.get("debug")) or not _out_of_memory(exc):
                _MEMORY_RESERVE.append(_reserve())
                raise
            _release_frames(exc)
        _exit_out_of_memory()       # reached from the out-of-memory handlers only, their frames released


#: the line an out-of-memory exit writes, encoded before it is needed
_OUT_OF_MEMORY = "error: out of memory (a smaller --chunk-size, --points or batch_size needs less)"
_OUT_OF_MEMORY_BYTES = (_OUT_OF_MEMORY + "\n").encode()
#: what main's clean-up handler leaves in place of an exit code
_RAN_OUT_OF_MEMORY = object()
#: whether the line has been written (click's clean-up may run out of memory once more)
_out_of_memory_said: list[bool] = []


def _reserve() -> mmap.mmap:
    """16 MiB of address space, never touched (it costs no physical memory)."""
    return mmap.mmap(-1, 16 << 20)


#: the address space given back first when memory runs out, so that the handler can run
_MEMORY_RESERVE = [_reserve()]


def _out_of_memory(exc: BaseException | None) -> bool:
    """Whether ``exc``, or an exception it was raised while handling, is the process running out of
    memory: a MemoryError or ENOMEM; CPython 3.11's SystemError "... without setting an exception" when
    it cannot allocate a frame (it sets no MemoryError); an extension module that cannot be mapped."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        text = str(exc)
        if (isinstance(exc, MemoryError) or (isinstance(exc, OSError) and exc.errno == errno.ENOMEM)
                or (isinstance(exc, SystemError) and text.endswith(("without exception set",
                                                                    "without setting an exception")))
                or (isinstance(exc, ImportError) and "failed to map segment" in text)):
            return True
        exc = exc.__context__ or exc.__cause__
    return False


def _release_frames(exc: BaseException | None) -> None:
    """Clear the locals of every finished frame in the tracebacks of ``exc`` and the exceptions it
    chains: they hold what filled the memory, which the out-of-memory line then has again."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        tb = exc.__traceback__
        while tb is not None:
            try:
                tb.tb_frame.clear()
            except RuntimeError:      # a frame still running (this handler's own)
                pass
            tb = tb.tb_next
        exc = exc.__context__ or exc.__cause__


def _exit_out_of_memory():
    """The out-of-memory line on stderr (written straight to the descriptor when even that cannot be
    allocated), once; exit 1."""
    gc.collect()
    if not _out_of_memory_said:
        _out_of_memory_said.append(True)
        try:
            say(_OUT_OF_MEMORY)
        except MemoryError:
            try:
                os.write(2, _OUT_OF_MEMORY_BYTES)
            except OSError:
                pass
    sys.exit(1)


def say(text: str) -> None:
    """One line on stderr; a closed stderr drops it (the exit code still tells)."""
    note(text)


def _silence_dead_streams() -> None:
    """Point stdout and stderr at /dev/null, so Python's flush at exit does not complain about the
    pipe whose reader has gone."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    for stream in (sys.stdout, sys.stderr):
        try:
            os.dup2(devnull, stream.fileno())
        except (OSError, ValueError, AttributeError):
            pass
    os.close(devnull)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show tracebacks instead of one-line errors.")
@click.version_option(package_name=DIST_NAME, message="%(prog)s (distribution %(package)s) %(version)s")
@click.pass_context
def main(ctx, debug):
    """dse: design-space explorer for LLM-inference accelerators and speculative decoding."""
    import warnings
    ctx.obj = {"debug": debug}
    warnings.formatwarning = lambda message, category, *a, **k: f"warning: {message}\n"


def _kv(ctx, param, values):
    out = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"expected FIELD=VALUE, got {item!r}")
        out[key.strip()] = value.strip()
    return out


@main.command("eval", short_help="One design: fit, latency, speculative accounting.")
@click.option("--hw", required=True, help="Target accelerator: database name or YAML file.")
@click.option("--chips", default=1, show_default=True, type=int,
              help="Target chips: --pp stages of chips/pp chips in tensor parallel.")
@click.option("--pp", default="auto", show_default=True,
              help="Pipeline stages of consecutive layers (divides --chips, at most the layers); auto = 1 where "
                   "the chips split the attention heads, else the fewest stages that leave a group that does.")
@click.option("--target", required=True, help="Target model: name, YAML file or HF config.json.")
@click.option("--ep", default="1", show_default=True,
              help="Expert-parallel ranks for an MoE target (divides the experts and --chips; 1 = tensor parallel).")
@click.option("--dp", default="1", show_default=True,
              help="Attention data-parallel ranks for an MoE target (divides a stage's chips; each rank's chips run "
                   "attention for its share of the sequences; 1 = attention tensor-parallel).")
@click.option("--draft", default="none", show_default=True,
              help="Model name/file, eagle, eagle2, eagle3, mtp[:N], medusa:H, hydra[:H], ngram, retrieval, early-exit:L, or none.")
@click.option("--draft-hw", default=None,
              help="Put the draft model on this colocated draft chip (name or YAML file) [default: none: the draft "
                   "runs on the target chips].")
@click.option("--draft-chips", default=1, show_default=True, type=int, help="Draft chips (with --draft-hw).")
@click.option("--k", "k", default=None,
              help="Drafted tokens per iteration (1-32), or auto (the best k up to 16, or 0 = no speculation) "
                   "[default: auto; a tree method also re-chooses its tree for the batch (--tree-nodes)].")
@click.option("--alpha", type=float, default=None,
              help="i.i.d. conditional per-token acceptance rate in [0, 1] [default: from the published table or the "
                   "acceptance model, with a band].")
@click.option("--acceptance", default=None, help="Per-position conditional rates A1,A2,... [default: none].")
@click.option("--tau", type=float, default=None, help="Mean tokens per target pass (at the given --k) [default: none].")
@click.option("--rank-acceptance", default=None,
              help="Tree acceptance per rank P1,P2,... (Sequoia), or rows per depth P1,P2;Q1,Q2 (Medusa heads) "
                   "[default: from --alpha and the rank profile].")
@click.option("--rank-profile", default=None,
              help="Tree rank profile scaled to --alpha (default: the drafter kind's measured one; geometric = the "
                   "optimistic limit alpha(1-alpha)^(r-1)); see hardware_db/acceptance/rank_profiles.yaml.")
@click.option("--tree-nodes", default=None,
              help="Verify the best draft tree of N nodes, N <= 1024 (depth <= k); 0 = a chain of k drafts; "
                   "published = the method's published tree at its depth [default, without --k: a tree method's "
                   "fastest of a chain, trees of 4-32 nodes and its published tree, with k auto, for this batch].")
@click.option("--tree", default=None,
              help="The tree a serving framework builds, priced and credited as built: "
                   "sglang[:topk=K,steps=S,tokens=N] (SGLang's EAGLE tree, defaults 4, 5, 8), vllm[:k=N] (a chain), "
                   "vllm:tree=AxBxC (vLLM's static tree), trtllm:draft_len=D (a chain), "
                   "trtllm:topk=K,draft_len=D,draft_tokens=N (its dynamic tree), or best [default: best, dse's best "
                   "tree of each size, as --tree-nodes].")
@click.option("--datastore-gb", default=0.0, show_default=True, type=float,
              help="Retrieval datastore in host memory (--draft ngram), never device memory.")
@click.option("--batch", default=1, show_default=True, type=int, help="Concurrent sequences per step.")
@click.option("--prompt", default=128, show_default=True, type=int, help="Prompt tokens.")
@click.option("--output", default=128, show_default=True, type=int, help="Generated tokens.")
@click.option("--dtype", default="bf16", show_default=True,
              help="Weight format: bf16|fp16|fp8|int8|int4 (every weight at that width; int8/int4 weight-only), "
                   "or a checkpoint format with a 16-bit head: fp8-head16|fp8-block|int4-g128|int4-g32|q4f16_1|nvfp4|mxfp4.")
@click.option("--kv-dtype", default=None,
              help="KV-cache dtype: bf16|fp16|fp8|int8|int4 [default: 16-bit (fp16 with fp16 weights, else bf16), "
                   "whatever --dtype].")
@click.option("--temperature", default=0.0, show_default=True, type=float,
              help="Sampling temperature (moves acceptance; > 0 sends draft probabilities over a draft-chip link).")
@click.option("--task", default="chat", show_default=True,
              help="Text generated: chat, code, math, summarization, translation, qa, rag, mix (equal parts of "
                   "chat, translation, summarization, qa, math, rag) or weights chat=0.4,code=0.6.")
@click.option("--overlap", is_flag=True, help="Draft chip drafts ahead while the target verifies.")
@click.option("--continuous", is_flag=True,
              help="Continuous batching: --batch = requests in flight (steady state); steps also run arriving prompts.")
@click.option("--sla-ttft-ms", type=float, default=None,
              help="Serving SLA: time to first token, ms; with --sla-tpot-ms prints the best aggregated and "
                   "disaggregated operating points over concurrency 1-1024 [default: none].")
@click.option("--sla-tpot-ms", type=float, default=None,
              help="Serving SLA: mean time per output token, ms (with --sla-ttft-ms) [default: none].")
@click.option("--serving", default="best", show_default=True, type=click.Choice(["agg", "disagg", "best"]),
              help="Deployments the SLA search tries: one pool, prefill and decode pools, or both.")
@click.option("--arrivals", default="closed", show_default=True, type=click.Choice(["closed", "poisson"]),
              help="How requests arrive under --continuous and in the SLA search: a closed loop of --batch clients "
                   "(the usual benchmark) or at random times with that many in flight on average.")
@click.option("--rate-rps", type=float, default=None,
              help="With an SLA: size the fleet, the fewest chips that serve this many requests a second "
                   "[default: none].")
@click.option("--max-batched-tokens", default=8192, show_default=True, type=int,
              help="Under --continuous and in the SLA search: token budget of an iteration (decode tokens + prompt "
                   "chunks; vLLM's max_num_batched_tokens, 8192 by default on large GPUs).")
@click.option("--runtime", default=None,
              help="Fixed-cost stack from hardware_db/runtimes: graphs|gpt-fast|eager|xla|dataflow|sglang|vllm|"
                   "rocm-vllm|trtllm-mmha (`dse runtimes list`) [default: the device's default_runtime: graphs for NVIDIA GPUs, "
                   "rocm-vllm for MI300X-class].")
@click.option("--baseline-ms", type=float, default=None,
              help="Anchor: a measured autoregressive ms/token; the fixed costs are scaled to match it [default: none].")
@click.option("--set", "set_fields", multiple=True, callback=_kv, metavar="FIELD=VALUE",
              help="Override a target-hardware or runtime field (e.g. mem_bw_tb_s=4); repeat for several "
                   "[default: none].")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def eval_cmd(as_json, **kwargs):
    """Evaluate one design: fit, latency and the full speculative accounting."""
    from ..api import evaluate_design
    from .text import eval_table
    result = evaluate_design(**kwargs)
    points = result.get("sla_points")
    if points is not None and not any(p["met"] for p in points.values()):
        from ..errors import SpecError
        raise SpecError(None, "--sla-ttft-ms/--sla-tpot-ms", f"{kwargs['sla_ttft_ms']:g}/{kwargs['sla_tpot_ms']:g}",
                        f"no operating point of this design meets them at concurrency 1-1024 (one request alone: "
                        f"TTFT {result['ttft_ms']:.1f} ms, TPOT {result['spec_ms_per_token']:.2f} ms); loosen them"
                        if result.get("fits") and result.get("spec_ms_per_token") is not None else
                        "no operating point of this design meets them: it does not fit in memory")
    click.echo(json.dumps(result, indent=2) if as_json else eval_table(result))


def count_phrase(n: int, noun: str) -> str:
    """'1 part file', '3 part files'."""
    return f"{n} {noun}{'' if n == 1 else 's'}"
