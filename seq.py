import http.client, json, os, sys, time, urllib.parse, statistics
url=sys.argv[1]; csv=os.environ["CSV"]
job = {"profile": "python-analysis", "language": "python", "code": open("/work/main/examples/data-analyst/analysis.py").read(), "files": {"data.csv": open(csv).read()}}
u=urllib.parse.urlparse(url); c=http.client.HTTPConnection(u.hostname,u.port,timeout=300)
rows=[]
for i in range(int(sys.argv[2])):
    time.sleep(0.5)
    t=time.perf_counter(); c.request("POST","/v1/executions",body=json.dumps(job).encode(),headers={"content-type":"application/json"}); r=json.loads(c.getresponse().read()); ms=(time.perf_counter()-t)*1000
    rows.append((ms, r["timing"].get("runMs"), r["resourceUsage"].get("cpuTimeMs"), r["resourceUsage"]["peakMemoryBytes"]>>20, r["timing"].get("warmStart")))
for row in rows: print(row)
