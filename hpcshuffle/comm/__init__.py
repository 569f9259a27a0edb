"""How samples and signals move between ranks: the world (rank, node, rendezvous), the one MPI
payload transport, the PLS exchange and locality loans built on it, naming a lost peer, and the
fault injection the chaos tests use."""
