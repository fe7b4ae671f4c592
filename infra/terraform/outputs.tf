output "live_hosts" {
  description = "Live datacenter instances per role."
  value       = module.live.hosts
}

output "offline_hosts" {
  description = "Offline datacenter instances per role."
  value       = module.offline.hosts
}

# `terraform output -raw ansible_inventory > ../ansible/inventories/aws/hosts.yml`
output "ansible_inventory" {
  description = "The Ansible inventory of both datacenters (infra/ansible)."
  value = templatefile("${path.module}/templates/inventory.yml.tftpl", {
    ansible_user = var.ansible_user
    security     = var.security
    # the ZooKeeper port the security groups open is the one the playbooks make every client use
    zookeeper_tls = var.zookeeper_tls && var.security != "plaintext"
    ports         = var.ports
    spark_ports   = var.spark_ports
    live          = module.live.hosts
    offline       = module.offline.hosts
  })
}
