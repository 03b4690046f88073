"""The parts of GradCache (Gao et al. 2021; sentence-transformers' ``Cached*`` losses) that 03's loop runs as its
``--cache-chunk`` backward (``backward_cached``): a batch's embeddings made a chunk at a time without gradient, each
chunk's random state kept to replay its dropout, and the surrogate whose gradient is the loss's through one chunk."""

import torch


class RandomState:
    """The CPU and CUDA generator states at a point, to replay a forward pass's dropout."""

    def __init__(self):
        self.cpu = torch.get_rng_state()
        self.cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() \
            else None

    def restore(self):
        torch.set_rng_state(self.cpu)
        if self.cuda is not None:
            torch.cuda.set_rng_state_all(self.cuda)


def embed_chunks(model, objective, chunks):
    """Each chunk's random state before it is embedded, and the batch's embeddings (``objective.embed``'s tuple, the
    chunks' rows joined), made without gradient and returned as leaves the loss's gradient can be taken to."""
    states, parts = [], []
    with torch.no_grad():
        for chunk in chunks:
            states.append(RandomState())
            parts.append(objective.embed(model, chunk))
    return states, tuple(torch.cat(part).detach().requires_grad_() for part in zip(*parts))


def surrogate(embeddings, grads, start):
    """A scalar whose gradient through one chunk's ``embeddings`` (rows ``start`` on of the batch) is the loss's:
    each embedding times the loss's gradient with respect to it (``grads``, of the whole batch)."""
    return sum((emb.float() * grad[start:start + len(emb)]).sum() for emb, grad in zip(embeddings, grads))
