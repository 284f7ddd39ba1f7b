"""pytorch/examples' gcn/main.py, shrunk: a graph convolution over a normalised
adjacency matrix, its features and matrix made sparse on the host and sent to the device
(`load()` returns `x.to_sparse().to(device)`, as gcn's `load_cora` does), the layers
multiply with torch.spmm. The device comes from --device (cpu or lazy)."""
import argparse

import torch
import torch.nn.functional as F
from torch import nn


class GraphConv(nn.Module):
    def __init__(self, input_dim, output_dim):
        super().__init__()
        self.kernel = nn.Parameter(torch.empty(input_dim, output_dim))
        nn.init.xavier_normal_(self.kernel)

    def forward(self, input_tensor, adj_mat):
        support = torch.mm(input_tensor, self.kernel)
        return torch.spmm(adj_mat, support)


def load(nodes, features, device):
    x = (torch.rand(nodes, features) < 0.3).float()
    adj = (torch.rand(nodes, nodes) < 0.1).float() + torch.eye(nodes)
    degree = torch.diag(adj.sum(dim=1) ** -0.5).to_sparse()
    adj = degree @ adj @ degree.to_dense()
    labels = torch.arange(nodes) % 3
    return x.to_sparse().to(device), labels.to(device), adj.to_sparse().to(device)


parser = argparse.ArgumentParser()
parser.add_argument("--device", default="cpu")
parser.add_argument("--epochs", type=int, default=4)
args = parser.parse_args()
if args.device == "lazy":
    import torch._lazy.ts_backend
    torch._lazy.ts_backend.init()
torch.manual_seed(0)
device = torch.device(args.device)
features, labels, adj_mat = load(40, 8, device)
layers = nn.ModuleList([GraphConv(8, 16), GraphConv(16, 3)]).to(device)
optimizer = torch.optim.SGD(layers.parameters(), lr=0.5)
for epoch in range(args.epochs):
    optimizer.zero_grad()
    hidden = F.relu(layers[0](features, adj_mat))
    loss = F.cross_entropy(layers[1](hidden, adj_mat), labels)
    loss.backward()
    optimizer.step()
    print(f"epoch {epoch} loss {loss.item():.4f}")
