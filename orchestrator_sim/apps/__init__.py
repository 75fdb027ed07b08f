"""The simulated systems' HTTP apps (starlette): compose-manager, the gpu-manager dashboard, the
model-proxy peers, the inference endpoint and the soak relay."""
