import torch, fmha
from fmha.cuda import loader
lib = loader.load()
torch.zeros(1, device="cuda")
for D, var in ((512, 0), (128, 1), (128, 0), (256, 0)):
    print("max active clusters", D, var, [lib.fmha_sm90_max_active_clusters(D, var, c) for c in (1, 2, 4, 8)])
