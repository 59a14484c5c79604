# The table in docs/safeudp.md from hand-run.sh's results in $OUT.
import json, sys, os, glob
HALF = 10.0
NOMINAL = 16e6
def mean_rate(flow, t0):
    ivs = [iv for iv in flow['intervals'] if iv['start_s'] >= t0 - 1e-3]
    b = sum(iv['bytes'] for iv in ivs); d = sum(iv['end_s'] - iv['start_s'] for iv in ivs)
    return 8 * b / d if d else 0.0
def first(flow, pred):
    for iv in flow['intervals']:
        if pred(iv): return iv['end_s']
    return None
rows = []
for n in (1, 4, 16):
  for q in ('droptail', 'codel'):
    for m in ('udp', 'ccid3', 'ignore', 'step-down', 'tfrc'):
        p = os.path.join(os.environ.get('OUT', '/tmp/sufair'), f'{n}-{q}-{m}.json')
        if not os.path.exists(p): continue
        try: v = json.load(open(p))
        except Exception: continue
        c = v['tests']['cbr']['result']; b = v['tests']['bg']['result']
        rx = [f for f in c['server']['flows'] if f['role'] == 'receiver'][0]
        tx = [f for f in c['client']['flows'] if f['role'] == 'sender'][0]
        cbr = mean_rate(rx, HALF)
        tcp = sum(mean_rate(f, HALF) for f in b['server']['flows'] if f['role'] == 'receiver')
        share = 100 * tcp / (tcp + cbr) if tcp + cbr else 0
        d = tx['total'].get('dccp')
        if d:
            sent = d['data_sent']; got = rx['total']['dccp']['data_received']
            drops = d['dropped_by_ccid']
        else:
            u = rx['total']['udp']; sent = u['packets'] + u['lost']; got = u['packets']; drops = 0
        loss = 100 * (sent - got) / sent if sent else 0
        su = lambda iv: (iv.get('dccp') or {}).get('safeudp') or {}
        notice = first(tx, lambda iv: su(iv).get('events', {}).get('persistent_network', 0) > 0)
        react = first(tx, lambda iv: (su(iv).get('app_rate_bps') or NOMINAL) < NOMINAL)
        enforced = first(tx, lambda iv: su(iv).get('events', {}).get('enforcing', 0) > 0)
        f = lambda x: '-' if x is None else f'{x:.1f}'
        valid = v['lab'].get('accuracy', {}).get('valid', '?')
        rows.append((n, q, m, cbr/1e3, loss, drops, tcp/1e3, share, f(notice), f(react), f(enforced)))
print('| vs TCP | qdisc | CBR via | CBR delivered kbit/s | CBR loss % | CCID drops | TCP total kbit/s | TCP share % | notice s | app lowers s | enforced s |')
print('|---|---|---|---|---|---|---|---|---|---|---|')
names = {'udp': 'plain UDP', 'ccid3': 'CCID3', 'ignore': 'SafeUDP ignore', 'step-down': 'SafeUDP step-down', 'tfrc': 'SafeUDP tfrc'}
for r in rows:
    print(f'| {r[0]} | {r[1]} | {names[r[2]]} | {r[3]:.0f} | {r[4]:.2f} | {r[5]} | {r[6]:.0f} | {r[7]:.1f} | {r[8]} | {r[9]} | {r[10]} |')
