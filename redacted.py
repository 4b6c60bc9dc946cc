import anthropic, sys, json
from anthropic import Anthropic
port = int(sys.argv[1]); M="fake-model"
c = Anthropic(base_url=f"http://127.0.0.1:{port}", api_key="k", max_retries=0)
for mode in ("create","stream"):
    kw = dict(model=M, max_tokens=4000, thinking={"type":"enabled","budget_tokens":1024}, messages=[{"role":"user","content":"[[reason:secret plan]] [[hidden]] hi"}])
    if mode=="create": m = c.messages.create(**kw)
    else:
        with c.messages.stream(**kw) as s: m = s.get_final_message()
    print(mode, [ (b.type, (getattr(b,'data',None) or getattr(b,'signature',''))[:12], getattr(b,'thinking',None)) for b in m.content])
    hist = kw["messages"] + [{"role":"assistant","content":[b.model_dump(exclude_none=True) for b in m.content]}, {"role":"user","content":"[[echo]]"}]
    m2 = c.messages.create(**{**kw, "messages": hist})
    print("  echo:", m2.content[-1].text[:300].replace("\n"," | "))
