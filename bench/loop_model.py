#!/usr/bin/env python3
"""bench/loop_model.py — the planes frame's super-block loop as arithmetic
(session 60), for writing a form's prediction before building it.

The frame (cuda/mmqp.cuh, cuda/mmq4p.cu): NWG consumer warpgroups share
one SM's tensor pipe, which runs their wgmma groups first in, first out.
Each warpgroup, each super-block, runs a script of ops:
  ('turn',)         wait for its turn (warpgroups take turns in order)
  ('iss', k, d)     queue a job k of d us in the pipe
  ('hand',)         hand the turn to the next warpgroup
  ('wait', k)       wait until job k is done, plus LAT (the latency from a
                    group leaving the pipe to the warp running on)
  ('cpu', d)        d us of the warpgroup's own instructions; with RHO < 1
                    two warpgroups' instructions at once each run at RHO
The period is the time a block needs for NSB super-blocks over NSB.

S, the pipe time of one int8 m64n128k32 step (or of the min term's f16
m64n128k16 step), is the probe's 68-72 cycles: 1.26 us for the two
warpgroups' 32 steps (session 59). C1 = 0.50 us (the v1 chain, session 58's
marks without the min term), C2 = 0.22 (the min term's chain), G = 0.2 (the
chain's end to the next landing mark).

Calibration against what was measured (H100, 4096 x 14336 x 512; run this
file for the table): with LAT 0.25-0.35 the model gives main's period as
1.98-2.08 us (measured ~2.04) and the no-min-term lever 0.82-0.83x
(measured 0.85x). It does NOT give the turn handed after the min term (TM:
model 0.93-1.02x, measured 1.08x, trace 1.24x) nor the single accumulator
set (SM: model 1.13x, measured 1.03-1.05x). So what a warpgroup loses is not
one fixed latency after its products; bench/issue59-call.sh's marks (land0
-> feed -> x0 -> park0) are what can say where it goes, and LAT / G should
be refitted to them (act0 / turn0 / x0) before the model's other rows are
believed.

The n96 rows are periods of a block with 3 x 64 x 96 outputs (132 blocks at
4096 x 512 rows: 22 x 6 tiles), 1.125x today's 128 x 128: a period x0.89 or
less would be a gain. Their registers are not there (3 consumer warpgroups
get at most ~157-160 a thread; acc + two sets at n96 is 144 before
addresses, the early form's third set 192).
"""
S, C1, C2, G, I = 0.0394, 0.50, 0.22, 0.20, 0.03


def simulate(script, nwg, nsb=56, lat=0.25, rho=1.0, dt=0.0005, glat=None):
    q, fin, sigs = [], {}, {}
    glat = lat if glat is None else glat
    pc, sb, work = [0] * nwg, [0] * nwg, [0.0] * nwg
    ops = [script(w) for w in range(nwg)]
    turn, t, busy, last = 0, 0.0, 0.0, 0.0
    while min(sb) < nsb:
        for w in range(nwg):
            while sb[w] < nsb and work[w] <= 0:
                op = ops[w][pc[w]]
                if op[0] == 'turn' and turn != w:
                    break
                if op[0] == 'iss':
                    q.append([(w, sb[w], op[1]), op[2]])
                elif op[0] == 'hand':
                    turn = (w + 1) % nwg
                elif op[0] == 'wait':
                    key = (w, sb[w], op[1])
                    if key not in fin or t < fin[key] + lat:
                        break
                elif op[0] == 'sig':  # an event the other warpgroup's gate waits for
                    sigs[(w, sb[w], op[1])] = t
                elif op[0] == 'gate':  # two warpgroups: 0 at s waits for 1's event of s - 1, 1 for 0's of s
                    idx = sb[w] - 1 if w == 0 else sb[w]
                    key = (1 - w, idx, op[1])
                    if idx >= 0 and (key not in sigs or t < sigs[key] + glat):
                        break
                elif op[0] == 'cpu':
                    work[w] = op[1]
                pc[w] += 1
                if pc[w] == len(ops[w]):
                    pc[w], sb[w] = 0, sb[w] + 1
                    if sb[w] == nsb:
                        last = max(last, t + work[w])
        if min(sb) >= nsb:
            break
        while sb[turn] >= nsb:
            turn = (turn + 1) % nwg
        ncpu = sum(1 for w in range(nwg) if work[w] > 0)
        for w in range(nwg):
            if work[w] > 0:
                work[w] -= dt * (1.0 if ncpu == 1 else rho)
        if q:
            busy += dt
            q[0][1] -= dt
            if q[0][1] <= 0:
                fin[q.pop(0)[0]] = t
        t += dt
    end = max(t, last)
    return end / nsb, busy / end


# f scales a form's columns (0.75: n96 tiles a warpgroup)
def main_form(f=1.0):  # main: the min term after the planes' wait, the turn right after the issue
    return lambda w: [('turn',), ('iss', 'p', 16 * S * f), ('hand',), ('wait', 'p'), ('cpu', I),
                      ('iss', 'm', S * f), ('cpu', C1 * f), ('wait', 'm'), ('cpu', C2 * f + G)]


def no_min(f=1.0):  # the lever MMQ4P_LEVER=1
    return lambda w: [('turn',), ('iss', 'p', 16 * S * f), ('hand',), ('wait', 'p'), ('cpu', I + C1 * f + G)]


def tm(f=1.0):  # session 59's MMQ4P_TM: the turn after the min term's issue
    return lambda w: [('turn',), ('iss', 'p', 16 * S * f), ('wait', 'p'), ('cpu', I), ('iss', 'm', S * f),
                      ('hand',), ('cpu', C1 * f), ('wait', 'm'), ('cpu', C2 * f + G)]


def sm(f=1.0):  # session 59's MMQ4P_SM: one set, the min term with plane 1, a shift, then plane 2
    return lambda w: [('turn',), ('iss', 'm', S * f), ('iss', 'p1', 8 * S * f), ('hand',), ('wait', 'p1'),
                      ('cpu', 0.04), ('iss', 'p2', 8 * S * f), ('wait', 'p2'), ('cpu', I + (C1 + C2) * f + G)]


def early(f=1.0):  # not built: the min term issued before the planes (a third accumulator set)
    return lambda w: [('turn',), ('iss', 'm', S * f), ('iss', 'p', 16 * S * f), ('hand',), ('wait', 'p'),
                      ('cpu', I + (C1 + C2) * f + G)]


def ov(f=1.0, g=G):  # session 61's MMQ4P_OV: s + 1's first plane queued under s's chain (no turns)
    return lambda w: [('iss', 'p1', 8 * S * f), ('wait', 'p1'), ('cpu', I + 0.04), ('iss', 'p0n', 8 * S * f),
                      ('cpu', C1 * f), ('iss', 'm', S * f), ('wait', 'm'), ('cpu', C2 * f + g)]


def split(f=1.0):  # session 62's MMQ4P_SPLIT: the second plane after the other warpgroup's min term is issued
    return lambda w: [('turn',), ('iss', 'p1', 8 * S * f), ('gate', 'm'), ('iss', 'p', 8 * S * f), ('hand',),
                      ('wait', 'p'), ('cpu', I), ('iss', 'm', S * f), ('sig', 'm'), ('cpu', C1 * f), ('wait', 'm'),
                      ('cpu', C2 * f + G)]


FORMS = [('no min term (lever)', no_min(), 2, '0.85'), ('TM', tm(), 2, '1.08 (trace 1.24)'),
         ('SM', sm(), 2, '1.03-1.05'), ('early min term', early(), 2, '-'),
         ('n96, 3 warpgroups', main_form(0.75), 3, '-'), ('n96, 3 warpgroups, early', early(0.75), 3, '-'),
         ('OV (G after the chain)', ov(), 2, '1.03 (trace 0.91)'),
         ('OV, no gap after the chain', ov(g=0.0), 2, '1.03 (trace 0.91)'),
         ('SPLIT (gate at LAT)', split(), 2, '- (session 62, not run)')]

if __name__ == '__main__':
    for lat, rho in ((0.15, 1.0), (0.25, 1.0), (0.35, 1.0), (0.25, 0.7)):
        base, busy = simulate(main_form(), 2, lat=lat, rho=rho)
        print(f"LAT {lat} RHO {rho}: main {base:.3f} us a super-block (pipe {100 * busy:.0f}% busy; "
              "measured ~2.04 us, ncu 52%)")
        for name, fn, n, meas in FORMS:
            p, _ = simulate(fn, n, lat=lat, rho=rho)
            print(f"  {name:28s} period x{p / base:.2f}  (measured x{meas})")
        for gl in (0.1, 0.4, 0.6):
            p, _ = simulate(split(), 2, lat=lat, rho=rho, glat=gl)
            print(f"  {'SPLIT, gate latency %.1f' % gl:28s} period x{p / base:.2f}")
