"""Block-sparse causal attention forward as a Gluon kernel for Hopper (sm_90): TMA loads into
rings of shared-memory stages and warpgroup MMAs, which Triton's tile language on this host (3.6)
does not give an attention kernel (README.md).

A tile: one 128-token query block of one (batch, head), its CSR row walked in order, two
warpgroups of 64 query rows each (the softmax of a row never leaves its warp). Per 128-key block:
  S  = q . k^T                  (wgmma, q and k from shared memory; fp32 accumulation)
  P  = exp2(S * scale - m)      (online softmax in registers; the row's last block, the
                                 diagonal one, masked causally)
  O += P . v                    (wgmma, P from registers in fp16, v from shared memory in fp16)
V is converted bf16 -> fp16 in place in shared memory (each thread rewrites the 16-byte pieces
it read).

The kernel is persistent and warp-specialised: one program per SM takes tiles until none are
left. The tiles of the first two thirds of the (batch, head)s are dealt round-robin, with no atomic;
the rest come in order from a counter in device memory (a program slowed down, or dealt long rows,
takes fewer of those; each launch's last program sets the counter back to zero). A tile's place
needs no memory read: (batch, head) after (batch, head), each one's query blocks from the last to
the first; in the counter's third query block after query block, every head's longest rows first,
so the programs' last tiles are short rows and they end together. Padded ones, past the
sequence's end, are skipped by the producer (up to four in a row) and their places handed over
with the next tile; the consumers write them o = 0, lse = -inf. A
producer warpgroup takes the tiles and issues the TMA loads (the query block into one of two
buffers, beside a slot with the tile's place; K and V of each block into rings of 2 and 3, their
counters running on across tiles) and converts V; the two consumer warpgroups take
turns (an mbarrier ping-pong, FA3's schedule) to issue a block's scores and the previous block's
P.V, and each runs its softmax while the other's MMAs run. o leaves through the tile's query
buffer and a TMA store that is waited for only at the next tile. The next tile is taken, its row
read and its query block loaded at the current row's third step, where the producer would wait
for a ring slot anyway, so between two tiles of a program there is ~0.2 us (one program per tile:
0.4 us between CTAs, plus ~2 us of row reads and first loads inside each). Against one program
per tile, `kbench compare` said full 0.964 (0.944-0.984) FASTER (9/9 cases), quick 1.014 UNSURE,
with bit-identical outputs (README.md; a static round-robin deal was
faster on full but its times moved 2.3% between runs). A single partition of 8 warps in lockstep
was 25% slower.

The numbers are submission.py's Triton kernel's (PV_MODE = DIAG_MODE = "fp16", whose comment
says why): q.k^T of bf16 inputs accumulated in fp32, P and V in fp16 for P.V, o rounded to bf16
once, lse in natural log; padded query rows (token >= seq_len) and empty rows give o = 0,
lse = -inf.
"""
import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared, mbarrier, tma, warpgroup_mma, warpgroup_mma_wait)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

BLOCK = 128       # query rows per program, keys per CSR block
STAGES = 3        # V ring
K_STAGES = 2      # K ring
Q_BUFFERS = 2     # query blocks: the next tile's while this one's scores run and its o leaves
LOG2E = gl.constexpr(1.4426950408889634)
WS_CONSUMER_REGS = gl.constexpr(232)
WS_PRODUCER_REGS = gl.constexpr(40)


@gluon.jit
def _v_to_fp16(v_buf, num_warps: gl.constexpr, CHUNKS: gl.constexpr = 1):
    """Rewrites a V block in place as fp16 (exact for the challenge's randn values; see
    submission.py). Each thread writes back the very 16-byte pieces it read, so no thread
    overwrites another's input; the caller fences and syncs before an MMA reads it."""
    ld: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [num_warps, 1], [1, 0])
    vh = v_buf._reinterpret(gl.float16, v_buf.shape, v_buf.layout)
    ROWS: gl.constexpr = v_buf.shape[0] // CHUNKS
    for i in gl.static_range(CHUNKS):
        x = v_buf.slice(i * ROWS, ROWS).load(ld)
        vh.slice(i * ROWS, ROWS).store(x.to(gl.float16))


@gluon.jit
def _softmax_step(s, m_i, l_i, qk_scale):
    """Online softmax of one score tile in base 2: P (fp32), the old rows' rescale, new max and sum."""
    m_new = gl.maximum(m_i, gl.max(s, 1) * qk_scale)
    alpha = gl.exp2(m_i - m_new)
    p = gl.exp2(s * qk_scale - m_new[:, None])
    return p, alpha, m_new, l_i * alpha + gl.sum(p, 1)


@gluon.jit
def _tail_heads(heads):
    """How many of the last (batch, head)s the counter hands out, query block after query block."""
    return (heads + 2) // 3


@gluon.jit
def _tile(tile, n_tiles, row_ptr, seq_lens, H, NQB, BM: gl.constexpr):
    """Work item ``tile``: (batch, head) after (batch, head), each one's query blocks from the last
    (on a causal pattern the longest rows; first the padded ones past the sequence's end, which the
    producer skips) to the first; the last third of the (batch, head)s (``_tail_heads``), which the
    counter hands out, query block after query block, so the short rows at the sequences' start come
    last and the programs end together (kbench compare, 8 processes a side, against (batch, head)
    order throughout: full 0.986, quick 0.971-0.975; 941391d). Needs no
    memory read to place a tile, so its query block's load is one read (seq_len, beside the row's)
    after the tile is known. Returns (batch x head, first query token, seq_len, first CSR entry,
    entries); entries is 0 for a padded tile or an empty row, and for a tile past the last (no memory
    read)."""
    valid = tile < n_tiles
    tail = _tail_heads(n_tiles // NQB)
    d = tile - (n_tiles - tail * NQB)  # the place in the tail, negative before it
    bh = gl.where(d >= 0, n_tiles // NQB - tail + d % tail, tile // NQB)
    qb = NQB - 1 - gl.where(d >= 0, d // tail, tile % NQB)
    seq_len = gl.load(seq_lens + bh // H, mask=valid, other=0)
    row = row_ptr + bh * (NQB + 1) + qb
    start = gl.load(row, mask=valid, other=0)
    n = gl.load(row + 1, mask=valid, other=0) - start
    return bh, qb * BM, seq_len, start, gl.where(qb * BM < seq_len, n, 0)


@gluon.jit
def _next_tile(tile, programs, static_tiles, counter):
    """The tile this program takes after ``tile``: dealt round-robin up to static_tiles, then from the counter."""
    if tile + programs < static_tiles:
        nxt = tile + programs
    else:
        nxt = gl.maximum(static_tiles, programs) + gl.atomic_add(counter, 1)
    return nxt


@gluon.jit
def _tile_info(values, layout: gl.constexpr):
    """A tile's (batch x head, first query token, seq_len, CSR entries) and the padded tiles skipped
    before it (up to four: each one's first row in o, -1 for none) as one small tensor, held whole by
    every thread, for the query buffer's info slot; n < 0 says there are no more tiles."""
    i = gl.arange(0, 8, layout=layout)
    bh, q_start, seq_len, n, z0, z1, z2, z3 = values
    return gl.where(i == 0, bh, gl.where(i == 1, q_start, gl.where(i == 2, seq_len, gl.where(i == 3, n,
           gl.where(i == 4, z0, gl.where(i == 5, z1, gl.where(i == 6, z2, z3)))))))


@gluon.jit
def _publish(q_desc, q_buf, info_slot, q_bar, bh, q_start, seq_len, n, z0, z1, z2, z3, T_MAX):
    """Hands a tile to the consumers: its place (and z0-z3, the padded tiles skipped before it) into the
    info slot and its query block into the buffer, both behind q_bar (a padded tile or an empty row,
    n = 0, gets no query block: o = 0; n < 0 says there are no more tiles)."""
    info_layout: gl.constexpr = gl.BlockedLayout([8], [32], [gl.num_warps()], [0])
    info_slot.store(_tile_info((bh, q_start, seq_len, n, z0, z1, z2, z3), info_layout))
    gl.thread_barrier()  # every thread's info store before the arrival that publishes it
    if n > 0:
        mbarrier.expect(q_bar, q_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(q_desc, [bh * T_MAX + q_start, 0], q_bar, q_buf)
    else:
        mbarrier.arrive(q_bar, count=1)


@gluon.jit
def _ws_producer(q_desc, k_desc, v_desc, q_s, k_s, v_s, info_s, q_bar, q_empty, k_bar, v_bar, v16_bar, k_empty,
                 v_empty, row_ptr, col_idx, seq_lens, counter, H, B, NNZ, T_MAX):
    """The scheduler and the TMA loads. Tiles are dealt round-robin, then, for the last third of the
    (batch, head)s, taken in order from a counter shared by the programs, so a program slowed down,
    or dealt long rows, takes fewer of those. Per tile: its place into the info slot of a free query
    buffer and its query block into that buffer (once both consumers' o store of the tile that last
    used it has left), then each key block's K and V as soon as both consumers are done with the K
    or V that held the slot; each V block converted to fp16 in place once it has landed. Past the
    last tile, an info slot saying "no more", published the same way. The last program out sets the
    counter back to zero for the next call."""
    QBUF: gl.constexpr = q_s.shape[0]
    KST: gl.constexpr = k_s.shape[0]
    VST: gl.constexpr = v_s.shape[0]
    BN: gl.constexpr = k_s.shape[1]
    BM: gl.constexpr = q_desc.block_type.shape[0]
    NQB = T_MAX // BM
    n_tiles = NQB * H * B
    programs = gl.num_programs(0)
    # The tiles before the tail (as many as a multiple of the programs allows) are dealt round-robin,
    # with no atomic; the rest come from the counter, so a program slowed down still takes fewer.
    # (Against a quarter of the (batch, head)s from the counter: a third full 0.993, quick 0.991, no
    # case slower; a half full 1.000, quick 1.010, with retrieval-1 and -3 SLOWER.)
    static_tiles = (n_tiles - _tail_heads(H * B) * NQB) // programs * programs
    kv = 0
    tiles = 0
    # A program's first tile is dealt (its id). Each next one is dealt or taken from the counter, its
    # row read and the tile published (its place and query block) at the current row's third step
    # (its second on a row of 1-2 blocks, its only one on a padded tile): there the producer would
    # wait for a ring slot anyway, while the atomic and the row reads wait for their answers where
    # they stand. Not at the first step: the consumers' first P.V waits for the first V, which is
    # converted after it. The next tile's query block then lands while this one runs; its first
    # column is read at the row's last step.
    tile = gl.program_id(0)
    cur = _tile(tile, n_tiles, row_ptr, seq_lens, H, NQB, BM)  # read again (the prologue's stays there), from L2
    col_next = 0
    while tile < n_tiles:
        taken = n_tiles  # both set at i == take_at below (the loop runs at least once)
        nxt = cur
        bh, q_start, seq_len, start, n = cur
        base = bh * T_MAX
        cols = col_idx + bh.to(gl.int64) * NNZ + start
        take_at = gl.maximum(gl.minimum(n - 1, 2), gl.minimum(n, 1))
        if tiles == 0:  # the first tile's first block, read once its query block is on its way
            col_next = gl.load(cols, mask=n > 0, other=0)
        for i in range(n + 1):
            if i < n:
                j = kv + i
                row0 = base + col_next * BN
                col_next = gl.load(cols + i + 1, mask=i + 1 < n, other=0)
                sk = j % KST
                mbarrier.wait(k_empty.index(sk), ((j // KST) & 1) ^ 1)
                mbarrier.expect(k_bar.index(sk), k_desc.block_type.nbytes)
                tma.async_copy_global_to_shared(k_desc, [row0, 0], k_bar.index(sk), k_s.index(sk))
                sv = j % VST
                mbarrier.wait(v_empty.index(sv), ((j // VST) & 1) ^ 1)
                mbarrier.expect(v_bar.index(sv), v_desc.block_type.nbytes)
                tma.async_copy_global_to_shared(v_desc, [row0, 0], v_bar.index(sv), v_s.index(sv))
            if i > 0:  # block i-1's V, behind block i's loads
                j = kv + i - 1
                sv = j % VST
                mbarrier.wait(v_bar.index(sv), (j // VST) & 1)
                # In 32-row pieces: 16-row ones took twice the round trips, and the row's last P.V waits for this
                # conversion (kbench compare 0.961 / 0.963 FASTER on full); 64-row ones spill at 40 registers.
                _v_to_fp16(v_s.index(sv), 4, 4)
                fence_async_shared()
                gl.thread_barrier()
                mbarrier.arrive(v16_bar.index(sv), count=1)
            if i == take_at:  # the next tile, or "no more tiles", into the other query buffer
                # Tiles past their sequence's end are skipped here, up to 4 in a row, and their places handed
                # to the consumers with the next tile, who write them (o = 0, lse = -inf) while their last o store
                # is in flight. Handed over as tiles of their own each cost the consumers ~1.4 us: the next
                # tile's take, reads and first loads with nothing beside them (kbench compare, 8 processes a
                # side: the five full cases that have such tiles 0.976-0.990 FASTER, the others SAME).
                taken = _next_tile(tile, programs, static_tiles, counter)
                n_bh, n_q, n_sl, n_st, n_n = _tile(taken, n_tiles, row_ptr, seq_lens, H, NQB, BM)
                z0 = -1
                z1 = -1
                z2 = -1
                z3 = -1
                nz = 0
                while (nz < 4) & (taken < n_tiles) & (n_q >= n_sl):  # past its sequence's end
                    z0 = gl.where(nz == 0, n_bh * T_MAX + n_q, z0)
                    z1 = gl.where(nz == 1, n_bh * T_MAX + n_q, z1)
                    z2 = gl.where(nz == 2, n_bh * T_MAX + n_q, z2)
                    z3 = gl.where(nz == 3, n_bh * T_MAX + n_q, z3)
                    nz += 1
                    taken = _next_tile(taken, programs, static_tiles, counter)
                    n_bh, n_q, n_sl, n_st, n_n = _tile(taken, n_tiles, row_ptr, seq_lens, H, NQB, BM)
                nxt = (n_bh, n_q, n_sl, n_st, n_n)
                qi = (tiles + 1) % QBUF
                mbarrier.wait(q_empty.index(qi), (((tiles + 1) // QBUF) & 1) ^ 1)
                _publish(q_desc, q_s.index(qi), info_s.index(qi), q_bar.index(qi), nxt[0], nxt[1], nxt[2],
                         gl.where(taken < n_tiles, nxt[4], -1), z0, z1, z2, z3, T_MAX)
            if i == gl.maximum(n - 1, take_at):  # the next tile's first block (this row's columns all read)
                col_next = gl.load(col_idx + nxt[0].to(gl.int64) * NNZ + nxt[3], mask=nxt[4] > 0, other=0)
        kv += n
        tiles += 1
        tile = taken
        cur = nxt
    if gl.atomic_add(counter + 1, 1) == programs - 1:  # every program has taken its last tile
        gl.atomic_xchg(counter, 0)
        gl.atomic_xchg(counter + 1, 0)


@gluon.jit
def _ws_turn(turn_bar, WG: gl.constexpr, k):
    """Waits for this warpgroup's k-th turn to issue MMAs (warpgroup 0 goes first)."""
    mbarrier.wait(turn_bar.index(WG), (k & 1) ^ (1 - WG))


@gluon.jit
def _ws_softmax(s, m_i, l_i, qk_scale, diagonal, p_op: gl.constexpr, WG: gl.constexpr):
    """Block softmax of 64 rows (the diagonal block masked causally): P in fp16 as the next P.V's
    register operand, the accumulator's rescale, new max and sum.

    Only the mask sits in the branch, so each call site carries one softmax body, not a masked and
    an unmasked one: the kernel's code went from 90.5 to 74.9 KB, and with it 3.5-6.7 us a call of
    fetching its instructions again after other code ran (README.md, df06608)."""
    BM: gl.constexpr = s.shape[0]
    BN: gl.constexpr = s.shape[1]
    if diagonal:
        rows = gl.arange(0, BM, layout=gl.SliceLayout(1, s.type.layout)) + WG * BM
        keys = gl.arange(0, BN, layout=gl.SliceLayout(0, s.type.layout))
        s = gl.where(keys[None, :] <= rows[:, None], s, float("-inf"))
    pf, alpha, m_i, l_i = _softmax_step(s, m_i, l_i, qk_scale)
    return gl.convert_layout(pf.to(gl.float16), p_op), alpha, m_i, l_i


@gluon.jit
def _zero_skipped(info, field, o_ptr, lse_ptr, z_rows, z_cols, D: gl.constexpr, zl: gl.constexpr):
    """o = 0 and lse = -inf on this warpgroup's rows of the padded tiles the producer skipped (info fields
    4-7: each one's first row in o, -1 for none)."""
    nz = gl.sum(gl.where((field >= 4) & (info >= 0), 1, 0), 0)
    for z in range(nz):  # a count known only at run time: one copy of the stores in the code
        rows = gl.sum(gl.where(field == 4 + z, info, 0), 0) + z_rows
        gl.store(o_ptr + rows[:, None].to(gl.int64) * D + z_cols[None, :],
                 gl.zeros([z_rows.shape[0], D], gl.bfloat16, layout=zl))
        gl.store(lse_ptr + rows, gl.full([z_rows.shape[0]], float("-inf"), gl.float32, layout=gl.SliceLayout(1, zl)))


@gluon.jit
def _ws_consumer(q_s, k_s, v_s, info_s, o_desc, q_bar, q_empty, k_bar, v16_bar, k_empty, v_empty, turn_bar, o_ptr,
                 lse_ptr, T_MAX, qk_scale, WG: gl.constexpr):
    """64 query rows of each tile the producer hands over (its info slot, beside its query block):
    per key block, its scores and the previous block's P.V issued in this warpgroup's turn, then its
    softmax while the other warpgroup's MMAs run. lse goes out from registers, o through the tile's
    query buffer and a TMA store; the buffer is handed back to the producer at the next tile, once
    that store has read it."""
    QBUF: gl.constexpr = q_s.shape[0]
    KST: gl.constexpr = k_s.shape[0]
    VST: gl.constexpr = v_s.shape[0]
    BN: gl.constexpr = k_s.shape[1]
    D: gl.constexpr = k_s.shape[2]
    BM: gl.constexpr = q_s.shape[1] // 2
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BN, 16])
    p_op: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=2)
    zl: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])
    info_layout: gl.constexpr = gl.BlockedLayout([8], [32], [4], [0])
    s_zero = gl.zeros([BM, BN], gl.float32, layout=mma)
    field = gl.arange(0, 8, layout=info_layout)
    z_rows = WG * BM + gl.arange(0, BM, layout=gl.SliceLayout(1, zl))
    z_cols = gl.arange(0, D, layout=gl.SliceLayout(0, zl))
    kv = 0
    turns = 0
    tiles = 0
    pending = 0  # the last tile's o store still reading its query buffer
    mbarrier.wait(q_bar.index(0), 0)
    info = info_s.index(0).load(info_layout)
    n = gl.sum(gl.where(field == 3, info, 0), 0)
    while n >= 0:
        qi = tiles % QBUF
        bh = gl.sum(gl.where(field == 0, info, 0), 0)
        q_start = gl.sum(gl.where(field == 1, info, 0), 0)
        seq_len = gl.sum(gl.where(field == 2, info, 0), 0)
        base = bh * T_MAX
        if pending:  # the last tile's o has left its query buffer: the buffer may refill
            tma.store_wait(0)
            mbarrier.arrive(q_empty.index((tiles - 1) % QBUF), count=1)
            pending = 0
        if n == 0:  # a padded tile or an empty row: o = 0, lse = -inf
            mbarrier.arrive(q_empty.index(qi), count=1)
            rows = base + q_start + z_rows
            gl.store(o_ptr + rows[:, None].to(gl.int64) * D + z_cols[None, :], gl.zeros([BM, D], gl.bfloat16, layout=zl))
            gl.store(lse_ptr + rows, gl.full([BM], float("-inf"), gl.float32, layout=gl.SliceLayout(1, zl)))
        else:
            q_mine = q_s.index(qi).slice(WG * BM, BM)
            m_i = gl.full([BM], float("-inf"), gl.float32, layout=gl.SliceLayout(1, mma))
            l_i = gl.zeros([BM], gl.float32, layout=gl.SliceLayout(1, mma))
            acc = gl.zeros([BM, D], gl.float32, layout=mma)
            # Block 0: scores only.
            sk = kv % KST
            mbarrier.wait(k_bar.index(sk), (kv // KST) & 1)
            _ws_turn(turn_bar, WG, turns)
            s_tok = warpgroup_mma(q_mine, k_s.index(sk).permute((1, 0)), s_zero, use_acc=False, is_async=True)
            mbarrier.arrive(turn_bar.index(1 - WG), count=1)
            s = warpgroup_mma_wait(num_outstanding=0, deps=(s_tok,))
            mbarrier.arrive(k_empty.index(sk), count=1)
            p, alpha, m_i, l_i = _ws_softmax(s, m_i, l_i, qk_scale, n == 1, p_op, WG)
            for t in range(1, n):  # block t's scores and block t-1's P.V in one turn
                j = kv + t
                sk = j % KST
                sv = (j - 1) % VST
                mbarrier.wait(k_bar.index(sk), (j // KST) & 1)
                mbarrier.wait(v16_bar.index(sv), ((j - 1) // VST) & 1)
                _ws_turn(turn_bar, WG, turns + t)
                s_tok = warpgroup_mma(q_mine, k_s.index(sk).permute((1, 0)), s_zero, use_acc=False, is_async=True)
                v16 = v_s.index(sv)._reinterpret(gl.float16, [BN, D], v_s.layout)
                acc_tok = warpgroup_mma(p, v16, acc, is_async=True)
                mbarrier.arrive(turn_bar.index(1 - WG), count=1)
                s = warpgroup_mma_wait(num_outstanding=1, deps=(s_tok,))  # the scores; P.V runs on under the softmax
                mbarrier.arrive(k_empty.index(sk), count=1)  # this warpgroup is done with block t's K
                p, alpha, m_i, l_i = _ws_softmax(s, m_i, l_i, qk_scale, t == n - 1, p_op, WG)
                acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc_tok,))
                mbarrier.arrive(v_empty.index(sv), count=1)  # and with block t-1's V
                acc = acc * alpha[:, None]
            # The last block's P.V.
            j = kv + n - 1
            sv = j % VST
            mbarrier.wait(v16_bar.index(sv), (j // VST) & 1)
            _ws_turn(turn_bar, WG, turns + n)
            v16 = v_s.index(sv)._reinterpret(gl.float16, [BN, D], v_s.layout)
            acc_tok = warpgroup_mma(p, v16, acc, is_async=True)
            mbarrier.arrive(turn_bar.index(1 - WG), count=1)
            acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc_tok,))
            mbarrier.arrive(v_empty.index(sv), count=1)

            q_rows = q_start + WG * BM + gl.arange(0, BM, layout=gl.SliceLayout(1, mma))
            live = q_rows < seq_len
            gl.store(lse_ptr + base + q_rows, gl.where(live, (m_i + gl.log2(l_i)) / LOG2E, float("-inf")))
            # o through this warpgroup's half of the query buffer (its scores are all done) and a TMA store,
            # waited for at the next tile
            # One reciprocal a row, not a division an element: the same bits (l >= 1, where the GPU's acc / l
            # is acc * rcp(l)) in ~300 fewer instructions a warpgroup, which the tile's end waited to fetch.
            inv = gl.where(live, 1.0 / l_i, 0.0)
            q_mine.store((acc * inv[:, None] + 0.0).to(gl.bfloat16))  # + 0.0: padded rows' zeros stay +0
            fence_async_shared()
            gl.thread_barrier()
            tma.async_copy_shared_to_global(o_desc, [base + q_start + WG * BM, 0], q_mine)
            pending = 1
            kv += n
            turns += n + 1
        tiles += 1
        qi = tiles % QBUF
        mbarrier.wait(q_bar.index(qi), (tiles // QBUF) & 1)
        info = info_s.index(qi).load(info_layout)
        n = gl.sum(gl.where(field == 3, info, 0), 0)
        # The padded tiles the producer skipped before this one (or before "no more"), while this
        # warpgroup's o store is in flight.
        _zero_skipped(info, field, o_ptr, lse_ptr, z_rows, z_cols, D, zl)
    tma.store_wait(0)


@gluon.jit(do_not_specialize=["H", "B", "NNZ"])
def _bsa_fwd_ws(q_desc, k_desc, v_desc, o_desc, o_ptr, lse_ptr, row_ptr, col_idx, seq_lens, counter, H, B, NNZ, T_MAX,
                qk_scale, STAGES: gl.constexpr, K_STAGES: gl.constexpr, Q_BUFFERS: gl.constexpr, num_warps: gl.constexpr):
    """Persistent: each program takes tiles (query block, batch x head) from ``counter`` until none are
    left, so the next tile's loads run under the current tile's last MMAs and its store. Shared memory:
    Q_BUFFERS query blocks (each with its tile's info slot), a K ring of K_STAGES and a V ring of
    STAGES blocks, 32 KB each. ``counter``: two int32 zeros, left at zero."""
    BM: gl.constexpr = q_desc.block_type.shape[0]
    D: gl.constexpr = q_desc.block_type.shape[1]
    BN: gl.constexpr = k_desc.block_type.shape[0]
    q_s = gl.allocate_shared_memory(gl.bfloat16, [Q_BUFFERS, BM, D], q_desc.layout)
    info_s = gl.allocate_shared_memory(gl.int32, [Q_BUFFERS, 8], gl.SwizzledSharedLayout(1, 1, 1, [0]))
    k_s = gl.allocate_shared_memory(gl.bfloat16, [K_STAGES, BN, D], k_desc.layout)
    v_s = gl.allocate_shared_memory(gl.bfloat16, [STAGES, BN, D], v_desc.layout)
    q_bar = gl.allocate_shared_memory(gl.int64, [Q_BUFFERS, 1], mbarrier.MBarrierLayout())
    q_empty = gl.allocate_shared_memory(gl.int64, [Q_BUFFERS, 1], mbarrier.MBarrierLayout())
    k_bar = gl.allocate_shared_memory(gl.int64, [K_STAGES, 1], mbarrier.MBarrierLayout())
    k_empty = gl.allocate_shared_memory(gl.int64, [K_STAGES, 1], mbarrier.MBarrierLayout())
    v_bar = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v16_bar = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    turn_bar = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(Q_BUFFERS):
        mbarrier.init(q_bar.index(i), count=1)
        mbarrier.init(q_empty.index(i), count=2)  # one arrival per consumer
    for i in gl.static_range(K_STAGES):
        mbarrier.init(k_bar.index(i), count=1)
        mbarrier.init(k_empty.index(i), count=2)
    for i in gl.static_range(STAGES):
        mbarrier.init(v_bar.index(i), count=1)
        mbarrier.init(v16_bar.index(i), count=1)
        mbarrier.init(v_empty.index(i), count=2)
    for i in gl.static_range(2):
        mbarrier.init(turn_bar.index(i), count=1)
    fence_async_shared()
    # The first tile's query block goes out here, before the partitions start (~0.5 us sooner).
    bh, q_start, seq_len, start, n = _tile(gl.program_id(0), (T_MAX // BM) * H * B, row_ptr, seq_lens, H, T_MAX // BM, BM)
    _publish(q_desc, q_s.index(0), info_s.index(0), q_bar.index(0), bh, q_start, seq_len, n, -1, -1, -1, -1, T_MAX)
    gl.warp_specialize([
        (_ws_consumer, (q_s, k_s, v_s, info_s, o_desc, q_bar, q_empty, k_bar, v16_bar, k_empty, v_empty, turn_bar,
                        o_ptr, lse_ptr, T_MAX, qk_scale, 0)),
        (_ws_consumer, (q_s, k_s, v_s, info_s, o_desc, q_bar, q_empty, k_bar, v16_bar, k_empty, v_empty, turn_bar,
                        o_ptr, lse_ptr, T_MAX, qk_scale, 1)),
        (_ws_producer, (q_desc, k_desc, v_desc, q_s, k_s, v_s, info_s, q_bar, q_empty, k_bar, v_bar, v16_bar, k_empty,
                        v_empty, row_ptr, col_idx, seq_lens, counter, H, B, NNZ, T_MAX)),
    ], [4, 4], [WS_CONSUMER_REGS, WS_PRODUCER_REGS])


_MAJORS = {}


def _major(device) -> int:
    """The device's compute capability major, asked once per device (torch's query took ~5.5 us a
    call on the H100 host, warm)."""
    major = _MAJORS.get(device)
    if major is None:
        major = _MAJORS[device] = torch.cuda.get_device_capability(device)[0]
    return major


def supported(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> bool:
    """Whether this kernel runs the call: a Hopper GPU, bf16, head dim 128, contiguous tensors TMA can
    read (16-byte aligned bases), t_max a multiple of the block."""
    B, H, T, D = q.shape
    return (q.is_cuda and _major(q.device) == 9 and D == BLOCK and T % BLOCK == 0
            and all(t.dtype == torch.bfloat16 and t.shape == q.shape and t.is_contiguous() and t.data_ptr() % 16 == 0
                    for t in (q, k, v)))


_LAYOUTS = {}


def _descriptor(t: torch.Tensor, block_rows: int = BLOCK) -> TensorDescriptor:
    """A TMA descriptor over a contiguous (..., 128) tensor seen as (rows, 128), blocks of block_rows."""
    d = t.shape[-1]
    layout = _LAYOUTS.get(block_rows)
    if layout is None:
        layout = _LAYOUTS[block_rows] = gl.NVMMASharedLayout.get_default_for([block_rows, d], gl.bfloat16)
    return TensorDescriptor(t, [t.numel() // d, d], [d, 1], [block_rows, d], layout)


N_RUNTIME_ARGS = 15  # the kernel's arguments before the constexprs
_SMS = {}
_COUNTERS = {}


# torch's own getter of the current stream's handle, the one Triton's launcher reads: ~0.3 us a call
# where torch.cuda.current_stream(device).cuda_stream took ~6.5 us on the H100 host (warm).
_RAW_STREAM = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def raw_stream(device) -> int:
    """The handle of the current CUDA stream on ``device`` (a torch.device of type cuda)."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    return _RAW_STREAM(index) if _RAW_STREAM is not None else torch.cuda.current_stream(index).cuda_stream


def tile_counter(device, stream: int | None = None) -> torch.Tensor:
    """The tile counter of the calls on this device and stream (``stream``: its handle, the current
    one if None): two int32 zeros, which every launch leaves at zero (its last program resets them).
    One per stream, so that calls on two streams at once never share one."""
    key = (device, raw_stream(device) if stream is None else stream)
    found = _COUNTERS.get(key)
    if found is None:
        found = _COUNTERS[key] = torch.zeros(2, dtype=torch.int32, device=device)
    return found


def grid(q) -> tuple:
    """One program per SM (fewer where there are fewer tiles): the kernel is persistent."""
    B, H, T, D = q.shape
    sms = _SMS.get(q.device)
    if sms is None:
        sms = _SMS[q.device] = torch.cuda.get_device_properties(q.device).multi_processor_count
    return (min(sms, (T // BLOCK) * B * H), 1)


def arguments(q, k, v, row_ptr, col_idx, seq_lens, o, lse, qk_scale: float, stages: int) -> tuple:
    """The kernel's arguments, runtime ones then constexprs (STAGES, num_warps), for a direct launch."""
    return (_descriptor(q), _descriptor(k), _descriptor(v), _descriptor(o, BLOCK // 2),
            *other_arguments(q, row_ptr, col_idx, seq_lens, o, lse, qk_scale, stages))


def other_arguments(q, row_ptr, col_idx, seq_lens, o, lse, qk_scale: float, stages: int,
                    stream: int | None = None) -> tuple:
    """The arguments after the four descriptors (q, k, v, o); ``stream``: the launch's (its handle),
    the current one if None."""
    B, H, T, D = q.shape
    return (o, lse, row_ptr, col_idx, seq_lens, tile_counter(q.device, stream),
            *_scalar_arguments(H, B, col_idx.shape[-1], T, qk_scale, stages))


def _scalar_arguments(H: int, B: int, nnz: int, T: int, qk_scale: float, stages: int) -> tuple:
    """The kernel's arguments after its pointers: the runtime scalars, then the constexprs."""
    return (H, B, nnz, T, qk_scale, stages, K_STAGES, Q_BUFFERS, 4)


class DirectLauncher:
    """Launches a compiled kernel through the raw C launcher under Triton's Python one, with the
    TMA descriptors (q, k, v, o) encoded once per address instead of on every call.

    Per call Triton 3.6 builds a TensorDescriptor object per tensor and its launcher encodes each
    (cuTensorMapEncodeTiled) before the launch: in the original's native protocol, where every
    host step is slow, that was ~0.1 ms of a 0.3 ms return (d5f02ee).
    An encoded descriptor is a function of the tensor's address, its (rows, 128) shape and the
    block, never of its contents, so one cached by those cannot go stale: a later tensor at the
    same address and size gets the same descriptor it would be encoded to. The cache keeps the
    last 64. Built from the compiled kernel's launcher internals; ``create`` returns None where
    they differ (another Triton), and the caller keeps the ordinary launch."""

    CACHE = 64
    N_DESCRIPTORS = 4

    def __init__(self, kernel, n_args: int, fill, dtype_to_host):
        run = kernel.run
        cells = dict(zip(run.launch.__code__.co_freevars, (c.cell_contents for c in run.launch.__closure__)))
        self.raw, self.meta = cells["launcher"], cells["tensordesc_meta"]
        if (len(self.meta) != self.N_DESCRIPTORS or any(m is None for m in self.meta) or run.global_scratch_size
                or run.profile_scratch_size or run.launch_cooperative_grid):
            raise TypeError("not the launcher this was written for")
        self.base = (kernel.function, run.launch_cooperative_grid, run.launch_pdl, None, None,
                     kernel.packed_metadata, None, None, None)
        self.n_args, self.fill, self.to_host, self.maps, self.counters = n_args, fill, dtype_to_host, {}, {}

    @classmethod
    def create(cls, kernel, n_args: int):
        try:
            from triton.backends.nvidia.driver import TMA_DTYPE_DEVICE_TO_HOST
            from triton.runtime.driver import driver
            return cls(kernel, n_args, driver.active.utils.fill_tma_descriptor, TMA_DTYPE_DEVICE_TO_HOST)
        except Exception:  # noqa: BLE001 - any difference in Triton's internals: the ordinary launch
            return None

    def _map(self, t: torch.Tensor, meta: dict) -> list:
        return self._encoded(t.data_ptr(), t.numel() // t.shape[-1], t.shape[-1], meta)

    def _encoded(self, ptr: int, rows: int, d: int, meta: dict) -> list:
        """The launcher's arguments for one descriptor over (rows, d) at ``ptr``, encoded once."""
        key = (ptr, rows, d, tuple(meta["block_size"]))
        found = self.maps.get(key)
        if found is None:
            if len(self.maps) >= self.CACHE:
                self.maps.pop(next(iter(self.maps)))
            found = self.maps[key] = [self.fill(ptr, meta["swizzle"], meta["elem_size"],
                                                self.to_host[meta["elem_type"]], meta["block_size"],
                                                [rows, d], [d, 1], 0), rows, d, d, 1]
        return found

    def __call__(self, grid, stream, q, k, v, o, rest: tuple) -> None:
        """``rest``: the arguments after the descriptors (as ``other_arguments`` gives them)."""
        args = [*self._map(q, self.meta[0]), *self._map(k, self.meta[1]), *self._map(v, self.meta[2]),
                *self._map(o, self.meta[3]), *rest]
        self.raw(grid[0], grid[1], 1, stream, *self.base, *args[:self.n_args + 4 * self.N_DESCRIPTORS])

    def launch_pointers(self, device, stream: int, ptrs: tuple, shape: tuple, nnz: int, qk_scale: float,
                        stages: int) -> None:
        """The same launch from what the caller has read once: ``stream`` the current one's handle,
        ``ptrs`` the addresses of q, k, v, o, lse, row_ptr, col_idx, seq_lens (the caller has checked
        them: CUDA, 16-byte aligned), ``shape`` q's (B, H, T, D). The launcher is handed ints, so it
        neither asks each tensor for its data_ptr nor the driver about each pointer (~10 us of a
        cold host's call)."""
        q, k, v, o = ptrs[:4]
        B, H, T, d = shape
        counter = self.counters.get(stream)
        if counter is None:   # the counter tensor lives on in _COUNTERS, so its address stays valid
            counter = self.counters[stream] = tile_counter(device, stream).data_ptr()
        rows = B * H * T
        m = self.meta
        args = [*self._encoded(q, rows, d, m[0]), *self._encoded(k, rows, d, m[1]), *self._encoded(v, rows, d, m[2]),
                *self._encoded(o, rows, d, m[3]), *ptrs[3:], counter,
                *_scalar_arguments(H, B, nnz, T, qk_scale, stages)]
        self.raw(min(_SMS[device], (T // BLOCK) * B * H), 1, 1, stream, *self.base,
                 *args[:self.n_args + 4 * self.N_DESCRIPTORS])


def launch(q, k, v, row_ptr, col_idx, seq_lens, o, lse, qk_scale: float, stages: int = STAGES):
    """Runs the kernel (one program per SM) through Triton's JIT and returns the compiled kernel;
    q, k, v, o contiguous (B, H, T, 128) bf16. 4 warps per partition, 12 in all: at 168 registers
    each they fill the register file, and the partitions then rebalance them."""
    args = arguments(q, k, v, row_ptr, col_idx, seq_lens, o, lse, qk_scale, stages)[:N_RUNTIME_ARGS]
    return _bsa_fwd_ws[grid(q)](*args, STAGES=stages, K_STAGES=K_STAGES, Q_BUFFERS=Q_BUFFERS, num_warps=4, maxnreg=168)
