"""PyTorch twins of gpuperf's models: torchvision's for the three zoo models, and
SimpleCNN as src/nn/models.c defines it (same module names)."""
import torch.nn as nn
import torchvision.models as tvm


class SimpleCNN(nn.Module):
    def __init__(self, num_classes=1000, size=32, dropout=0.5):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 32, 3, padding=1)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.conv3 = nn.Conv2d(64, 128, 3, padding=1)
        self.pool = nn.MaxPool2d(2, 2)
        self.relu = nn.ReLU(inplace=True)
        self.fc1 = nn.Linear(128 * (size // 8) ** 2, 256)
        self.drop = nn.Dropout(dropout)
        self.fc2 = nn.Linear(256, num_classes)

    def forward(self, x):
        x = self.pool(self.relu(self.conv1(x)))
        x = self.pool(self.relu(self.conv2(x)))
        x = self.pool(self.relu(self.conv3(x)))
        x = self.relu(self.fc1(x.flatten(1)))
        return self.fc2(self.drop(x))


def build(name, classes, size):
    if name == "simple_cnn":
        return SimpleCNN(classes, size)
    return getattr(tvm, name)(num_classes=classes)
