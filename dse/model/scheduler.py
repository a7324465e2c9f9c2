"""The serving scheduler under continuous batching with chunked prefill (the default of vLLM V1 and
TensorRT-LLM's in-flight batching): every iteration runs the B running sequences' decode (or verify)
tokens and fills the rest of a token budget with waiting prompts, first come, first served.

An iteration can take C = N_budget - B q prompt tokens beside B sequences' q tokens each. A prompt of
P tokens is served in max(1, P/C) iterations carrying min(C, P) of its tokens (``own``). While prompts
queue, iterations carry full chunks: the prompt-token server then runs at C / t(C) tokens/s, so a
prompt occupies it for S = P t(C) / C. Prompts arrive at lam per second: rho = lam S and the wait
behind the prompts ahead is M/D/1 (Pollaczek-Khinchine), W = rho S / (2 (1 - rho)). A new prompt also
waits for the running iteration to end: half a mean iteration where others run.

TTFT = t_iter / 2 + W + own, in seconds: a queue of prompt tokens at the rate the hardware prefills
them, so more FLOP/s never lengthens it at a given arrival rate or concurrency (and more bandwidth
never at a given arrival rate: at a given concurrency the same clients then send more requests per
second, and the prompts' queue is longer; a closed loop's real behaviour).

Two ways to load a server (say which a number assumes):
- closed loop, B concurrent clients (the common published benchmark setting): by the arrival theorem a
  new prompt finds the other B - 1 clients' requests, which arrive at lam = (B - 1) / L, L = TTFT +
  (G - 1) t_token a request's life; solved for the fixed point in TTFT. Past rho = 1 the loop is
  prefill-bound and the wait is at most the B - 1 prompts ahead, (B - 1) S.
- open loop (Poisson arrivals): at R requests/s, lam = R, and past rho = 1 the queue grows without
  bound (inf); at a mean of B requests in flight, lam = B / L (Little's law), the fixed point again
  without the clients' bound (``workload.arrivals: poisson``, ``--arrivals poisson``).
"""

from __future__ import annotations

import numpy as np


def prefill_capacity(budget_tokens, batch, q) -> np.ndarray:
    """C = N_budget - B q: prompt tokens an iteration can take beside B sequences' q decode or
    verify tokens each; <= 0 where the decode tokens alone fill the budget (no prompt can enter)."""
    return np.asarray(budget_tokens, dtype=np.float64) - np.asarray(batch, dtype=np.float64) * np.asarray(q)


def chunk_tokens(capacity, prompt_tokens) -> np.ndarray:
    """Prompt tokens in the iteration(s) that serve one prompt: min(C, P), 0 where C <= 0."""
    return np.clip(np.minimum(capacity, prompt_tokens), 0.0, None)


def prompt_times_s(prompt_tokens, capacity, own_iter_s, full_iter_s):
    """(own, S): the prompt's own iterations, max(1, P/C) x t(min(C, P)), and the time it occupies
    the prompt server while prompts queue, S = P t(C) / C; inf where C <= 0."""
    P = np.asarray(prompt_tokens, dtype=np.float64)
    C = np.asarray(capacity, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        ok = C > 0
        own = np.where(ok, np.maximum(P / np.where(ok, C, 1.0), 1.0) * own_iter_s, np.inf)
        busy = np.where(ok, P * np.asarray(full_iter_s) / np.where(ok, C, 1.0), np.inf)
    return own, busy


def md1_wait_s(rate_per_s, service_s):
    """W = rho S / (2 (1 - rho)), rho = lam S (M/D/1, Pollaczek-Khinchine); inf where rho >= 1."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        rho = np.asarray(rate_per_s) * np.asarray(service_s)
        w = np.where(rho < 1.0, rho * service_s / (2.0 * (1.0 - rho)), np.inf)
    return np.where(np.asarray(rate_per_s) > 0, w, 0.0)


def closed_loop_ttft_s(batch, output_tokens, s_per_token, iter_s, own_s, busy_s, poisson: bool = False):
    """TTFT of a closed loop of B clients (module docstring): x = a + W(x), a = head + own (head =
    t_iter/2 where others run), W the M/D/1 wait at lam = m/(x + g) (m = B - 1 others, g = (G - 1)
    t_token of decoding), at most m S. With z = x + g - m S the uncapped fixed point solves
    z^2 + (m S - g - a) z - m S^2/2 = 0 (its positive root); then W = min(x - a, m S).
    ``poisson``: requests arriving at random (an open loop) whose mean number in flight is B, so at
    lam = B/(x + g) (Little's law), every arrival at a random time in a running iteration, and no
    clients' bound on the queue."""
    B = np.asarray(batch, dtype=np.float64)
    g = (np.asarray(output_tokens, dtype=np.float64) - 1.0) * np.asarray(s_per_token)
    m = B if poisson else np.maximum(B - 1.0, 0.0)
    S = np.asarray(busy_s, dtype=np.float64)
    a = np.where(m > 0.0, 0.5 * np.asarray(iter_s), 0.0) + own_s
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        b = m * S - g - a
        root = np.sqrt(b * b + 2.0 * m * S * S)
        # the positive root, without cancellation: m S^2 / (b + root) where b > 0
        z = np.where(b > 0, m * S * S / (b + root), 0.5 * (root - b))
        w = np.maximum(z + m * S - g - a, 0.0)
        w = w if poisson else np.minimum(w, m * S)
    return np.where(np.isfinite(S) & np.isfinite(a), a + np.where(m > 0, w, 0.0), np.inf)


def open_loop_ttft_s(rate_per_s, iter_s, own_s, busy_s):
    """TTFT at R requests/s arriving at random (Poisson): t_iter/2 + M/D/1 wait at lam = R + own;
    inf past rho = 1."""
    return 0.5 * np.asarray(iter_s) + md1_wait_s(rate_per_s, busy_s) + own_s
