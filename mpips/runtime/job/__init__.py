"""One job assembled over a transport: `mpips train` over MPI, `mpips simulate` in virtual time, and a second level of servers."""
