import os, sys
from pyverbs.device import Context
from pyverbs.cq import CQ
ctx = Context(name='rrxe0')
cq = CQ(ctx, 64)
n, wcs = cq.poll(4)
print("first poll:", n)
cq2 = CQ(ctx, 32767)
cq2.resize(100)
print("resized poll:", cq2.poll(1)[0])
os.write(2, b"MARK-BEGIN\n")
for _ in range(1000):
    cq.poll(1)
os.write(2, b"MARK-END\n")
print("done")
