import json,statistics,sys
r=json.load(open(sys.argv[1]))
def row(name,xs):
    if not xs: return
    f=lambda k: [round(x[k],2) for x in xs]
    w,c,s,ch=f('wall'),f('cpu'),f('cpuSelf'),f('cpuChildren')
    print(f"| {name} | **{statistics.median(w):.2f}** ({', '.join(map(str,w))}) | **{statistics.median(c):.2f}** ({', '.join(map(str,c))}) | {statistics.median(s):.2f} | {statistics.median(ch):.2f} | {xs[0]['changes']} |")
print("| operation | wall s: median (samples) | CPU s: median (samples) | self | children | changes |")
print("|---|---|---|---|---|---|")
for k,n in [('ACreate','A  CLI: new stack (stack init + up)'),('BCreate','B  in-process: create stack + up'),('AChange','A  CLI: change 1->2 (up)'),('BChange','B  in-process: change 1->2'),('BSecondUpdate','B  in-process: 2nd update, same process/sm/backend (no-op)'),('BGetStackFresh','B  fresh backend+empty sm cache: open stack + no-op up'),('Destroy','B  in-process destroy + stack rm (1 sample)')]:
    row(n,r.get(k) or [])
print()
print("goroutines after each sample:", {k:[x['goroutines'] for x in (r.get(k) or [])] for k in ['ACreate','BCreate','BChange','BSecondUpdate']})
print("VmHWM", r['VmHWM'], "start", r['StartVmHWM'])
