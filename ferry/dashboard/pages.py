"""The HTML pages. Each is a small shell that polls its JSON endpoint (every ``REFRESH_MS``) and redraws
in place, so a page left open follows the pipeline without a reload; plots are server-side SVG images
(:mod:`ferry.dashboard.plots`) whose URL is refreshed the same way. No external script or stylesheet.
"""

from __future__ import annotations

from html import escape

from ferry.dashboard.favicon import ICON_LINK

REFRESH_MS = 5000

STYLE = """
body{font-family:sans-serif;margin:0;color:#222}
nav{background:#243447;padding:8px 16px}nav a{color:#fff;margin-right:18px;text-decoration:none}
nav a.here{font-weight:bold;text-decoration:underline}main{padding:12px 16px}
#banner{display:none;background:#fde2e1;border:1px solid #d9534f;padding:6px 10px;margin-bottom:10px}
table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ddd;padding:3px 6px;text-align:right}
th{background:#f3f3f3}td.name,th.name{text-align:left}
table.grid td.cell{width:18px;height:20px;padding:0;cursor:pointer}
table.grid th.hr{font-size:10px;font-weight:normal;padding:1px;text-align:center}
.complete{background:#4caf50}.incomplete{background:#e53935}.duplicates{background:#ff9800}
.empty{background:#eeeeee}.unknown{background:#9e9e9e}
.legend span{display:inline-block;padding:2px 8px;margin-right:6px;font-size:12px}
.bad{color:#c62828;font-weight:bold}.muted{color:#777;font-size:12px}
"""

COMMON_JS = f"const REFRESH_MS = {REFRESH_MS};" + """
function esc(s){return String(s==null?'-':s).replace(/[&<>"']/g,c=>({'&':'&amp;','<':'&lt;','>':'&gt;','"':'&quot;',"'":'&#39;'}[c]));}
function hourLabel(ms){return new Date(Number(ms)).toISOString().slice(0,13).replace('T',' ')+':00';}
function banner(msgs){const b=document.getElementById('banner');msgs=msgs.filter(Boolean);
  b.style.display=msgs.length?'block':'none';b.innerHTML=msgs.map(esc).join('<br>');}
async function getJSON(url){const r=await fetch(url,{cache:'no-store'});const d=await r.json();
  if(!r.ok) throw new Error(d.error||r.statusText);return d;}
function poll(fn){const run=async()=>{try{await fn();}catch(e){banner(['dashboard: '+e.message]);}
  document.getElementById('updated').textContent='updated '+new Date().toISOString().slice(11,19)+' UTC';};
  run();setInterval(run,REFRESH_MS);}
function qs(){return window.location.search;}
"""


def layout(title: str, here: str, body: str, script: str, prometheus_url: str | None) -> str:
    links = [("/", "Completeness"), ("/flow", "Flow"), ("/loads", "Loads"), ("/clusters", "Clusters")]
    nav = "".join(f'<a href="{u}"{" class=here" if u == here else ""}>{n}</a>' for u, n in links)
    if prometheus_url:
        nav += f'<a href="{escape(prometheus_url)}">Prometheus</a>'
    return (f"<!doctype html><html><head><meta charset=utf-8>{ICON_LINK}<title>ferry: {escape(title)}</title>"
            f"<style>{STYLE}</style></head><body><nav>{nav}</nav><main><h2>{escape(title)}</h2>"
            f'<div id=banner></div>{body}<p class=muted id=updated></p></main>'
            f"<script>{COMMON_JS}{script}</script></body></html>")


def error_page(status: int, message: str) -> str:
    return (f"<!doctype html><html><head><meta charset=utf-8>{ICON_LINK}<title>ferry: {status}</title>"
            f"<style>{STYLE}</style>"
            f'</head><body><nav><a href="/">Completeness</a></nav><main><h2>{status}</h2>'
            f"<p>{escape(message)}</p></main></body></html>")


GRID_JS = """
function healthMsgs(d){const m=[];if(d.error)m.push('audit unreadable: '+d.error);
  (d.unreachable||[]).forEach(z=>m.push('live cluster '+z+' unreachable: its producer counts are unknown, every hour is unknown'));
  if(d.completeness=='offline-only')m.push('completeness: offline-only (started with --offline-only): hours are judged from the counts '+
    'that reached the offline cluster alone; a stopped mirror makes a partial hour look complete');return m;}
function cellTitle(c){return c.topic+' '+hourLabel(c.hour_start)+': '+c.status+(c.completeness=='offline-only'?' (offline-only)':'')+
  '\\nproduced '+c.produced+', mirrored '+c.mirrored+', loaded '+c.loaded+'\\nmissing '+c.missing+', duplicates '+c.duplicates;}
let chosen=null;
async function drill(topic,hour){chosen=[topic,hour];const d=await getJSON('/api/completeness/'+encodeURIComponent(topic)+'/'+hour);
  const tiers=[...new Set(d.buckets.flatMap(b=>Object.keys(b.tiers)))].sort();
  let h='<h3>'+esc(topic)+' '+hourLabel(hour)+': <span class="'+esc(d.colour)+'">&nbsp;'+esc(d.status)+'&nbsp;</span></h3>';
  h+='<table id=buckets><tr><th class=name>bucket (UTC)</th>'+tiers.map(t=>'<th>'+esc(t)+'</th>').join('')+
     '<th>missing</th><th>duplicates</th><th class=name>per host</th></tr>';
  for(const b of d.buckets){const hosts=Object.entries(b.hosts).map(([t,hs])=>t+': '+Object.entries(hs).map(([k,v])=>k+'='+v).join(', ')).join('; ');
    h+='<tr><td class=name>'+new Date(b.bucket_start).toISOString().slice(11,16)+'</td>'+tiers.map(t=>'<td>'+esc(b.tiers[t]||0)+'</td>').join('')+
       '<td'+(b.missing?' class=bad':'')+'>'+b.missing+'</td><td'+(b.duplicates?' class=bad':'')+'>'+b.duplicates+'</td><td class=name>'+esc(hosts)+'</td></tr>';}
  document.getElementById('drill').innerHTML=h+'</table>';}
async function refresh(){const d=await getJSON('/api/completeness'+qs());banner(healthMsgs(d));
  const days=[];for(const x of d.hours){const day=new Date(x).toISOString().slice(0,10);
    if(days.length&&days[days.length-1][0]==day)days[days.length-1][1]++;else days.push([day,1]);}
  let h='<table class=grid id=grid><tr><th class=name>UTC</th>'+days.map(([day,n])=>'<th colspan='+n+'>'+day+'</th>').join('')+
    '</tr><tr><th class=name>topic</th>'+d.hours.map(x=>'<th class=hr title="'+hourLabel(x)+'">'+
    new Date(x).toISOString().slice(11,13)+'</th>').join('')+'</tr>';
  for(const t of d.topics){h+='<tr><td class=name>'+esc(t)+'</td>';
    for(const x of d.hours){const c=d.cells[t][String(x)];
      h+='<td class="cell '+esc(c.colour)+'" data-topic="'+esc(t)+'" data-hour="'+x+'" data-status="'+esc(c.status)+
         '" title="'+esc(cellTitle(c))+'"></td>';}h+='</tr>';}
  if(!d.topics.length)h+='<tr><td class=name>no audit events in this range</td></tr>';
  document.getElementById('gridbox').innerHTML=h+'</table>';
  document.querySelectorAll('td.cell').forEach(td=>td.onclick=()=>drill(td.dataset.topic,td.dataset.hour));
  if(chosen)await drill(chosen[0],chosen[1]);}
poll(refresh);
"""


def completeness_page(prometheus_url: str | None) -> str:
    legend = "".join(f'<span class="{c}">{c}</span>' for c in ("complete", "incomplete", "duplicates", "empty",
                                                                 "unknown"))
    body = (f'<p class=legend>{legend}</p><p class=muted>Topic x hour of event time (UTC); hover a cell for its '
            'counts, click it for its 10-minute buckets per tier and producing host. '
            '<code>?from=&amp;to=</code> (epoch ms, YYYY-MM-DDTHH or ISO 8601) choose the range.</p>'
            '<div id=gridbox></div><div id=drill></div>')
    return layout("Completeness", "/", body, GRID_JS, prometheus_url)


FLOW_JS = """
async function refresh(){const d=await getJSON('/api/flow'+qs());const m=[];if(d.error)m.push('audit unreadable: '+d.error);
  (d.unreachable||[]).forEach(z=>m.push('live cluster '+z+' unreachable'));
  const box=document.getElementById('plots');const now=Date.now();const p=new URLSearchParams(window.location.search);
  let h='';for(const t of Object.keys(d.topics)){p.set('topic',t);p.set('_',now);
    h+='<h3>'+esc(t)+'</h3><img class=flow alt="flow of '+esc(t)+'" src="/plot/flow.svg?'+p.toString()+'">';}
  box.innerHTML=h||'<p>no audit events in this range</p>';
  const g=await getJSON('/api/mirror');let rows='';
  for(const s of g.sources){if(s.error){m.push('mirror status of '+s.live_zookeeper+': '+s.error);continue;}
    for(const q of s.partitions)rows+='<tr><td class=name>'+esc(s.live_zookeeper)+'</td><td class=name>'+esc(q.topic)+'</td><td>'+q.partition+
      '</td><td>'+esc(q.live_end)+'</td><td>'+esc(q.committed)+'</td><td'+(q.lag?' class=bad':'')+'>'+esc(q.lag)+'</td><td>'+esc(q.lag_seconds)+
      '</td><td>'+esc(q.messages_per_s)+'</td><td>'+esc(q.offline_end)+'</td><td class=name>'+esc(q.owner)+'</td></tr>';}
  document.getElementById('lag').innerHTML='<table><tr><th class=name>live cluster</th><th class=name>topic</th><th>partition</th><th>live end</th>'+
    '<th>committed</th><th>lag</th><th>lag s</th><th>msg/s</th><th>offline end</th><th class=name>owner</th></tr>'+rows+'</table>';
  if(g.links_error)m.push('mirror links: '+g.links_error);let lr='';
  for(const k of (g.links||[])){const st='<td class="name'+(k.state.startsWith('failed')?' bad':'')+'">'+esc(k.state)+'</td>';
    if(!k.partitions.length)lr+='<tr><td class=name>'+esc(k.name)+'</td>'+st+'<td class=name>-</td><td colspan=8></td></tr>';
    for(const q of k.partitions)lr+='<tr><td class=name>'+esc(k.name)+'</td>'+st+'<td class=name>'+esc(q.topic)+'</td><td>'+q.partition+
      '</td><td>'+esc(q.live_end)+'</td><td>'+esc(q.copied_to)+'</td><td'+(q.lag?' class=bad':'')+'>'+esc(q.lag)+'</td><td>'+esc(q.lag_seconds)+
      '</td><td>'+esc(q.messages_per_s)+'</td><td>'+esc(q.owner)+'</td><td class=name>'+esc(q.state+(q.error?' ('+q.error+')':''))+'</td></tr>';}
  document.getElementById('links').innerHTML=(g.links||[]).length?'<table><tr><th class=name>link</th><th class=name>link state</th><th class=name>topic</th>'+
    '<th>partition</th><th>live end</th><th>copied to</th><th>lag</th><th>lag s</th><th>msg/s</th><th>leader</th><th class=name>state</th></tr>'+lr+'</table>':'<p>no mirror links</p>';
  document.getElementById('lagplot').src='/plot/lag.svg?_='+now;banner(m);}
poll(refresh);
"""


def flow_page(prometheus_url: str | None) -> str:
    body = ('<p class=muted>Messages per 10-minute bucket of event time, one line per tier (last 6 hours; '
            '<code>?from=&amp;to=</code>). A gap between the lines is a lag or a loss.</p><div id=plots></div>'
            '<h3>Mirror lag</h3><img id=lagplot alt="mirror lag"><div id=lag></div>'
            '<h3>Mirror links (embedded mirror)</h3><div id=links></div>')
    return layout("Flow", "/flow", body, FLOW_JS, prometheus_url)


LOADS_JS = """
function when(s){return s?new Date(s*1000).toISOString().slice(0,19).replace('T',' '):'-';}
function result(r){if(r.result!='failed')return esc(r.result);
  return 'failed'+(r.stage?' ('+esc(r.stage)+')':'')+(r.committed?', after its commit: the next run publishes it':'')+': '+esc(r.error);}
async function refresh(){const d=await getJSON('/api/loads');banner(d.error?[d.error]:[]);
  let h='<p>'+d.runs.filter(r=>r.result=='committed').length+' committed, <span'+(d.failed.length?' class=bad':'')+'>'+
    d.failed_total+' failed</span> (all time), '+d.pending+' committed but not yet published</p>';
  h+='<h3>Runs</h3><table id=runs><tr><th class=name>run</th><th>started</th><th>ended</th><th>rows</th><th>ranges</th>'+
    '<th class=name>hours touched (failed: attempted)</th><th class=name>result</th></tr>';
  for(const r of d.runs){const bad=r.result=='failed';
    h+='<tr class="'+(bad?'failed':'committed')+'"><td class=name>'+esc(r.run_id)+'</td><td>'+when(r.started)+'</td><td>'+when(r.ended)+'</td><td>'+
    esc(bad?'-':r.rows)+'</td><td>'+esc(bad?r.messages+' msgs':r.ranges)+'</td><td class=name>'+esc(r.hours_touched.join(', ')||'-')+
    '</td><td class="name'+(bad?' bad':'')+'">'+result(r)+'</td></tr>';}
  if(!d.runs.length)h+='<tr><td class=name colspan=7>no run in the ledger yet</td></tr>';
  h+='</table><h3>Began and never ended</h3>';
  h+=d.unfinished.length?'<table id=unfinished><tr><th class=name>run</th><th>started</th><th class=name>result</th></tr>'+
    d.unfinished.map(r=>'<tr><td class=name>'+esc(r.run_id)+'</td><td>'+when(r.started)+'</td><td class="name bad">'+esc(r.result)+
    '</td></tr>').join('')+'</table>':'<p>none</p>';
  if(d.lost&&d.lost.length)h+='<h3>Data lost to retention (skipped)</h3><pre>'+esc(JSON.stringify(d.lost,null,1))+'</pre>';
  document.getElementById('loads').innerHTML=h;}
poll(refresh);
"""


def loads_page(prometheus_url: str | None) -> str:
    body = ("<p class=muted>The loads' ledger, newest first: a run counts once it commits (the ledger is the commit "
            "point); a run that fails notes its error and the hours it was loading, and never counts as loaded "
            "(the next run removes its files). A run that began and noted nothing is running, or was killed."
            "</p><div id=loads></div>")
    return layout("Loads", "/loads", body, LOADS_JS, prometheus_url)


CLUSTERS_JS = """
async function refresh(){const d=await getJSON('/api/clusters');const m=[];let h='';
  for(const c of d.clusters){h+='<h3>'+esc(c.role)+' cluster <code>'+esc(c.zookeeper)+'</code></h3>';
    if(c.error){m.push(c.role+' cluster '+c.zookeeper+': '+c.error);h+='<p class=bad>unreachable: '+esc(c.error)+'</p>';continue;}
    const vb=c.version_mismatch?' class=bad':'';
    if(c.version_mismatch){m.push(c.role+' cluster '+c.zookeeper+': '+c.version_mismatch);
      h+='<p class="bad version-mismatch">version mismatch: '+esc(c.version_mismatch)+'</p>';}
    h+='<p>brokers: '+(c.brokers.map(b=>b.id+' '+esc(b.address)+' ('+esc(b.datacenter)+') ferry <span'+vb+'>'+esc(b.ferry_version)+'</span> '+
      esc(b.native)).join(', ')||'<span class=bad>none registered</span>')+
      ' &middot; under-replicated partitions: <span'+(c.under_replicated?' class=bad':'')+'>'+c.under_replicated+'</span>'+
      ' &middot; offline partitions: <span'+(c.offline_partitions?' class=bad':'')+'>'+c.offline_partitions+'</span></p>';
    h+='<table class=topics><tr><th class=name>topic</th><th>partition</th><th>leader</th><th>epoch</th><th class=name>replicas</th><th class=name>ISR</th><th class=name>state</th></tr>';
    for(const t of c.topics)for(const p of t.partitions)h+='<tr><td class=name>'+esc(t.topic)+'</td><td>'+p.partition+'</td><td>'+esc(p.leader)+'</td><td>'+
      p.leader_epoch+'</td><td class=name>'+p.replicas.join(',')+'</td><td class=name>'+p.isr.join(',')+'</td><td class=name>'+
      (!p.alive?'<span class=bad>offline</span>':p.under_replicated?'<span class=bad>under-replicated</span>':'ok')+'</td></tr>';
    h+='</table><h4>Consumer groups</h4>';
    h+=c.groups.length?'<table><tr><th class=name>group</th><th class=name>type</th><th>members</th><th>total lag</th><th class=name>lag per partition</th></tr>'+
      c.groups.map(g=>'<tr><td class=name>'+esc(g.group)+'</td><td class=name>'+esc(g.type)+'</td><td>'+g.members.length+'</td><td>'+esc(g.total_lag)+'</td><td class=name>'+
      esc(g.error||g.partitions.map(p=>p.topic+'/'+p.partition+'='+(p.lag==null?'-':p.lag)).join(' '))+'</td></tr>').join('')+'</table>':'<p>none</p>';}
  banner(m);document.getElementById('clusters').innerHTML=h;}
poll(refresh);
"""


def clusters_page(prometheus_url: str | None) -> str:
    return layout("Clusters", "/clusters", "<div id=clusters></div>", CLUSTERS_JS, prometheus_url)
