# Deterministic PyTorch training with cuDNN (convolutions, batch norm): the
# losses printed in full, so a native run and a qcuda run can be diffed.
import torch, torchvision
torch.manual_seed(0)
torch.backends.cudnn.deterministic = True
torch.backends.cudnn.benchmark = False
torch.use_deterministic_algorithms(True)
dev = torch.device('cuda')
print('cudnn', torch.backends.cudnn.version(), 'tf32 matmul', torch.backends.cuda.matmul.allow_tf32, 'tf32 cudnn', torch.backends.cudnn.allow_tf32)
p = torch.cuda.get_device_properties(0)
print('device', p.name, p.major, p.minor, p.multi_processor_count, p.total_memory // 2**20)
m = torchvision.models.resnet18(num_classes=10).to(dev)
opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
g = torch.Generator().manual_seed(1)
x = torch.randn(32, 3, 64, 64, generator=g).to(dev)
y = torch.randint(0, 10, (32,), generator=g).to(dev)
for step in range(4):
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(m(x), y)
    loss.backward()
    opt.step()
    print(f'step {step} loss {loss.item():.9f}')
