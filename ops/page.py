"""The status page at ``/``: one HTML file with inline CSS and JS (no build step, no CDN).

It polls ``/api/v1/cluster``, ``/api/v1/workers`` and ``/api/v1/history`` every 2 s and draws
the workers (load, memory, disks), the shuffles with their progress, push and fetch
throughput over the last minutes (an inline SVG) and the recent events.
"""

from __future__ import annotations

__all__ = ["PAGE_HTML"]

PAGE_HTML = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Croupier</title>
<style>
body{font:14px system-ui,sans-serif;margin:1.5em;color:#222}
h1{font-size:1.4em;margin:0 0 .3em}h2{font-size:1.1em;margin:1.2em 0 .4em}
table{border-collapse:collapse;min-width:40em}td,th{padding:3px 8px;border-bottom:1px solid #ddd;text-align:left;white-space:nowrap}
th{background:#f3f3f3}.bar{background:#eee;width:6em;height:.9em;display:inline-block;vertical-align:middle}
.bar>span{background:#4a8;height:100%;display:block}.warn{color:#b50}.bad{color:#c00;font-weight:bold}
#summary span{margin-right:1.5em}svg{border:1px solid #ddd;background:#fafafa}
.muted{color:#888}
</style></head>
<body>
<h1>Croupier</h1>
<div id="summary" class="muted">loading...</div>
<h2>Throughput (last minutes)</h2>
<svg id="chart" width="640" height="140"></svg>
<div><span style="color:#27c">&#9632; push</span> <span style="color:#e73">&#9632; fetch</span>
 <span id="rates" class="muted"></span></div>
<h2>Workers</h2>
<table id="workers"><thead><tr><th>worker</th><th>status</th><th>host</th><th>slots</th><th>load</th>
<th>memory</th><th>locations</th><th>disks free</th><th>push ack p50/p99</th><th>fetch p50/p99</th>
<th>commit p50/p99</th></tr></thead>
<tbody></tbody></table>
<h2>Shuffles</h2>
<table id="shuffles"><thead><tr><th>shuffle</th><th>maps</th><th>partitions</th><th>progress</th>
<th>state</th><th>bytes</th></tr></thead><tbody></tbody></table>
<h2>Recent events</h2>
<table id="events"><thead><tr><th>time</th><th>kind</th><th>event</th></tr></thead><tbody></tbody></table>
<script>
"use strict";
function fmtBytes(n){if(n==null)return "-";const u=["B","KiB","MiB","GiB","TiB"];let i=0;
 while(n>=1024&&i<u.length-1){n/=1024;i++}return n.toFixed(i?1:0)+" "+u[i]}
function fmtMs(s){return s==null?"-":(s*1000).toFixed(s<0.01?2:1)+" ms"}
function fmtQ(q){return q&&q.count?fmtMs(q.p50)+" / "+fmtMs(q.p99):"-"}
function esc(s){return String(s).replace(/[&<>"']/g,c=>"&#"+c.charCodeAt(0)+";")}
function cell(v){const td=document.createElement("td");td.innerHTML=v;return td}
function fill(id,rows,key){const tb=document.querySelector("#"+id+" tbody");tb.innerHTML="";
 for(const r of rows){const tr=document.createElement("tr");tr.dataset.key=r[0];
  for(const v of r.slice(1))tr.appendChild(cell(v));tb.appendChild(tr)}}
function bar(frac){const p=Math.max(0,Math.min(1,frac||0))*100;
 return '<span class="bar"><span style="width:'+p.toFixed(0)+'%"></span></span> '+p.toFixed(0)+'%'}
async function get(path){const r=await fetch(path,{cache:"no-store"});if(!r.ok)throw new Error(path+": "+r.status);
 return r.json()}
function drawChart(points){const svg=document.getElementById("chart");const W=640,H=140;
 const max=Math.max(1,...points.map(p=>Math.max(p.push_bps,p.fetch_bps)));
 function line(key,color){if(points.length<2)return "";const t0=points[0].at,t1=points[points.length-1].at||t0+1;
  const xy=points.map(p=>((p.at-t0)/Math.max(1,t1-t0)*(W-10)+5).toFixed(1)+","+(H-5-(p[key]/max)*(H-25)).toFixed(1));
  return '<polyline fill="none" stroke="'+color+'" stroke-width="2" points="'+xy.join(" ")+'"/>'}
 svg.innerHTML='<text x="5" y="14" font-size="11" fill="#888">max '+esc(fmtBytes(max))+'/s</text>'+
  line("push_bps","#27c")+line("fetch_bps","#e73");
 const last=points[points.length-1];document.getElementById("rates").textContent=last?
  "now: push "+fmtBytes(last.push_bps)+"/s, fetch "+fmtBytes(last.fetch_bps)+"/s":""}
async function refresh(){
 try{
  const [cluster,workers,hist]=await Promise.all([get("/api/v1/cluster"),get("/api/v1/workers"),get("/api/v1/history")]);
  document.getElementById("summary").innerHTML=
   "<span>role <b>"+esc(cluster.role)+"</b></span><span>term "+cluster.term+"</span><span>seq "+cluster.seq+
   "</span><span>"+cluster.workers+" workers</span><span>"+cluster.apps+" apps</span><span>"+cluster.shuffles+
   " shuffles ("+cluster.shuffles_committed+" committed)</span><span>log append p99 "+
   fmtMs(cluster.latency&&cluster.latency.append&&cluster.latency.append.p99)+"</span>";
  fill("workers",workers.map(w=>{const i=hist.workers[w.worker_id]||{};const m=i.memory||{};const q=i.latency||{};
   const disks=(i.dirs||[]).map(d=>esc(fmtBytes(d.free))).join(", ")||"-";
   const st=w.status==="lost"?'<span class="bad">lost</span>':(i.congested?'<span class="warn">'+esc(w.status)+' (congested)</span>':esc(w.status));
   return [w.worker_id,esc(w.worker_id),st,esc(w.host),w.used_slots+"/"+w.slots,
    w.load==null?"-":w.load.toFixed(2),m.cap?bar(m.used/m.cap)+" "+esc(fmtBytes(m.used)):"-",
    i.active_locations==null?"-":i.active_locations,disks,fmtQ(q.push_ack),fmtQ(q.fetch_chunk),fmtQ(q.commit)]}));
  fill("shuffles",hist.shuffles.map(s=>[s.app_id+"/"+s.shuffle_id,esc(s.app_id+"/"+s.shuffle_id),s.num_mappers,
   s.num_partitions,bar(s.mappers_ended/Math.max(1,s.num_mappers)),
   s.lost_partitions.length?'<span class="bad">data lost</span>':(s.committed?"committed":"writing"),
   s.committed?esc(fmtBytes(s.total_bytes)):"-"]));
  fill("events",hist.events.slice(-30).reverse().map((e,i)=>[String(i),esc(new Date(e.at*1000).toLocaleTimeString()),
   esc(e.kind),esc(e.text)]));
  drawChart(hist.throughput);
  document.body.dataset.updated=String(Date.now());
 }catch(err){document.getElementById("summary").innerHTML='<span class="bad">'+esc(err.message)+"</span>"}
}
refresh();setInterval(refresh,2000);
</script></body></html>
"""
