output "vpc_id" {
  description = "The datacenter's VPC."
  value       = aws_vpc.this.id
}

output "vpc_cidr" {
  description = "The VPC's address range."
  value       = aws_vpc.this.cidr_block
}

output "private_route_table_id" {
  description = "Route table of the private subnets (the root adds peering routes to it)."
  value       = aws_route_table.private.id
}

output "security_group_ids" {
  description = "Security group per role, and admin."
  value       = merge({ admin = aws_security_group.admin.id }, { for role, sg in aws_security_group.role : role => sg.id })
}

output "hosts" {
  description = "Per role, the instances in inventory order (1, 2, ...): name, private_ip, id."
  value = {
    for role in local.roles : role => [
      for i in range(local.counts[role]) : {
        name       = "${var.name}-${local.short[role]}-${i + 1}"
        private_ip = aws_instance.host["${local.short[role]}-${i + 1}"].private_ip
        id         = aws_instance.host["${local.short[role]}-${i + 1}"].id
      }
    ]
  }
}
