"""A cluster of nodes sharing one PostgreSQL database (`serve --cluster postgresql://...`,
issue 22 item 2): ownership by leases with fencing epochs, state stored in the database."""
